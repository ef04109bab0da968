package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Outcome is what became of one upstream test in one run.
type Outcome string

const (
	Pass Outcome = "pass"
	Fail Outcome = "fail"
	Skip Outcome = "skip"
	// NotRun is a test of the selection the run did not report: the run
	// ended early, or the test was filtered out.
	NotRun Outcome = "not run"
)

// Result is one test's outcome in one run.
type Result struct {
	Name    string        `json:"name"`
	Outcome Outcome       `json:"outcome"`
	Reason  string        `json:"reason,omitempty"` // why it was skipped or how it failed
	Time    time.Duration `json:"time"`
}

// junitSuites is the part of ginkgo's JUnit report this package reads
// (the framework writes <report-dir>/junit_01.xml).
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Seconds float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
}

// filteredOut is the skip message ginkgo writes for a spec that did not
// match the focus or matched the skip pattern: it was never started.
const filteredOut = "skipped"

// ParseJUnit reads a ginkgo JUnit report: every test that ran (passed,
// failed or skipped itself, with the reason it gave), by name without
// ginkgo's "[It] " prefix. Specs filtered out by focus or skip are left
// out; the suite's setup nodes ([SynchronizedBeforeSuite] and the like)
// are kept when they failed, as a failing setup explains every test
// after it.
func ParseJUnit(r io.Reader) ([]Result, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var out []Result
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			res := Result{
				Name: strings.TrimPrefix(c.Name, "[It] "),
				Time: time.Duration(c.Seconds * float64(time.Second)),
			}
			switch {
			case c.Status == "passed":
				res.Outcome = Pass
			case c.Status == "skipped" || c.Skipped != nil && c.Failure == nil && c.Error == nil:
				msg := ""
				if c.Skipped != nil {
					msg = strings.TrimSpace(c.Skipped.Message)
				}
				if msg == filteredOut || msg == "" && c.Seconds == 0 {
					continue
				}
				res.Outcome = Skip
				res.Reason = strings.TrimPrefix(msg, filteredOut+" - ")
			default:
				res.Outcome = Fail
				text := ""
				switch {
				case c.Failure != nil:
					text = firstNonEmpty(c.Failure.Text, c.Failure.Message)
				case c.Error != nil:
					text = firstNonEmpty(c.Error.Text, c.Error.Message)
				}
				res.Reason = failureSummary(c.Status, text)
				if c.Status == "timedout" && strings.Contains(text, specTimeoutMessage) {
					res.Reason = specTimedOut(text, res.Time)
				}
			}
			if !strings.HasPrefix(c.Name, "[It] ") && res.Outcome != Fail {
				continue
			}
			out = append(out, res)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// specTimeoutMessage is ginkgo's failure message for a spec that ran past
// its SpecTimeout (here: e2e.test's --spec-timeout).
const specTimeoutMessage = "A spec timeout occurred"

var (
	specRuntimeRE = regexp.MustCompile(`\(Spec Runtime: ([0-9.a-zµ]+)\)`)
	byStepRE      = regexp.MustCompile(`At \[By Step\] (.*?) \(Step Runtime: `)
)

// specTimedOut is the reason of a spec cut at its time bound: when it was
// cut (the spec's runtime in ginkgo's progress report, else the report's
// time) and the step it was in, if it named one.
func specTimedOut(text string, took time.Duration) string {
	if m := specRuntimeRE.FindStringSubmatch(text); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			took = d
		}
	}
	s := "timed out after " + took.Round(time.Second).String() + " (-spec-timeout)"
	if m := byStepRE.FindStringSubmatch(text); m != nil {
		s += ", in step: " + strings.TrimSpace(m[1])
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if strings.TrimSpace(x) != "" {
			return x
		}
	}
	return ""
}

// failureSummary is the failure's message without ginkgo's location
// lines ("In [It] at: file:line"), on one line, at most 300 characters.
func failureSummary(status, text string) string {
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "In [") || strings.HasPrefix(line, "At [") {
			continue
		}
		keep = append(keep, line)
		if len(keep) == 4 {
			break
		}
	}
	s := strings.Join(keep, " ")
	if s == "" {
		s = status
	} else if status != "" && status != "failed" {
		s = status + ": " + s
	}
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}
