package conformance

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Run is one proxy's results.
type Run struct {
	Proxy   string   `json:"proxy"`
	Results []Result `json:"results"`
}

func (r Run) byName() map[string]Result {
	m := make(map[string]Result, len(r.Results))
	for _, x := range r.Results {
		m[x.Name] = x
	}
	return m
}

// Row is one test across the runs, in the runs' order; a test a run did
// not report is NotRun there.
type Row struct {
	Name    string
	Results []Result
}

// Compare lines the runs up by test name: every test of selection (the
// tests the run was meant to execute) and every test any run reported.
func Compare(selection []string, runs ...Run) []Row {
	names := map[string]bool{}
	for _, n := range selection {
		names[n] = true
	}
	maps := make([]map[string]Result, len(runs))
	for i, r := range runs {
		maps[i] = r.byName()
		for n := range maps[i] {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	rows := make([]Row, 0, len(sorted))
	for _, n := range sorted {
		row := Row{Name: n, Results: make([]Result, len(runs))}
		for i := range runs {
			res, ok := maps[i][n]
			if !ok {
				res = Result{Name: n, Outcome: NotRun}
			}
			row.Results[i] = res
		}
		rows = append(rows, row)
	}
	return rows
}

// Regressions are the rows where the first run (the reference) passed and
// a later run did not.
func Regressions(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if len(r.Results) < 2 || r.Results[0].Outcome != Pass {
			continue
		}
		for _, x := range r.Results[1:] {
			if x.Outcome != Pass {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Totals counts one run's outcomes over the rows.
func Totals(rows []Row, run int) map[Outcome]int {
	t := map[Outcome]int{}
	for _, r := range rows {
		t[r.Results[run].Outcome]++
	}
	return t
}

// WriteTable prints the comparison as a Markdown table (test | one column
// per run), every skip and failure with its reason, then the totals and
// the regressions.
func WriteTable(w io.Writer, rows []Row, runs ...Run) {
	fmt.Fprintf(w, "| test |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s |", r.Proxy)
	}
	fmt.Fprintf(w, "\n|---|")
	for range runs {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |", cell(row.Name))
		for _, res := range row.Results {
			fmt.Fprintf(w, " %s |", cell(describe(res)))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| totals (%d tests) |", len(rows))
	for _, r := range runs {
		fmt.Fprintf(w, " %s |", r.Proxy)
	}
	fmt.Fprintf(w, "\n|---|")
	for range runs {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	for _, o := range []Outcome{Pass, Fail, Skip, NotRun} {
		fmt.Fprintf(w, "| %s |", o)
		for i := range runs {
			fmt.Fprintf(w, " %d |", Totals(rows, i)[o])
		}
		fmt.Fprintln(w)
	}
	if len(runs) >= 2 {
		reg := Regressions(rows)
		fmt.Fprintf(w, "\n%d test(s) passed with %s and not with the other proxy", len(reg), runs[0].Proxy)
		if len(reg) == 0 {
			fmt.Fprintln(w, ".")
			return
		}
		fmt.Fprintln(w, ":")
		for _, r := range reg {
			fmt.Fprintf(w, "- %s:", r.Name)
			for i, res := range r.Results[1:] {
				fmt.Fprintf(w, " %s %s", runs[i+1].Proxy, describe(res))
			}
			fmt.Fprintln(w)
		}
	}
}

// describe is a result as a table cell: the outcome, with the reason of a
// skip or failure.
func describe(r Result) string {
	s := string(r.Outcome)
	if r.Reason != "" && r.Outcome != Pass {
		s += ": " + r.Reason
	}
	return s
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
