package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The Markdown files whose links are checked, relative to the repository.
func checkedFiles(t *testing.T) []string {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		files[i] = filepath.Join("docs", files[i])
	}
	return append(files, "README.md", "CHANGELOG.md", "e2e/README.md")
}

var (
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// lines yields a Markdown file's lines outside fenced code blocks.
func lines(src string) []string {
	var out []string
	fence := ""
	for _, l := range strings.Split(src, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
		case strings.HasPrefix(t, "```"), strings.HasPrefix(t, "~~~"):
			fence = t[:3]
		default:
			out = append(out, l)
		}
	}
	return out
}

// anchors are the ids GitHub gives a file's headings: lower case,
// punctuation but - and _ dropped, spaces to -, repeats numbered -1, -2.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines(src) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		text := strings.NewReplacer("`", "", "*", "").Replace(m[2])
		text = inlineLink.ReplaceAllString(text, "$1")
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestLinks(t *testing.T) {
	root := ".."
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	checked := 0
	for _, file := range checkedFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines(string(b)) {
			for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				if path == "" {
					path = file
				} else {
					path = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(filepath.Join(root, path)); err != nil {
						t.Errorf("%s: link %s: %s does not exist", file, target, path)
						continue
					}
				}
				checked++
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
					t.Errorf("%s: link %s: %s has no heading #%s", file, target, path, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d links checked", checked)
	}
}
