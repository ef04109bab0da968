package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config/v1beta1"
)

// RenderConfig lists the configuration objects herald does not use as
// written: a refused edit with the version kept in force, or an object
// left out. Nothing is printed when every object is in use.
func RenderConfig(out io.Writer, objs []ConfigObject) error {
	return renderConfigText(out, BuildConfig(objs))
}

func renderConfigText(out io.Writer, issues []ConfigIssue) error {
	if len(issues) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(out, "\nConfiguration herald does not use as written (kubectl describe shows the events):"); err != nil {
		return err
	}
	for _, c := range issues {
		if _, err := fmt.Fprintf(out, "  %s %s: %s\n    %s\n", c.Kind, c.Name, c.State, c.Message); err != nil {
			return err
		}
	}
	return nil
}

// Render writes one line per LoadBalancer Service IP: the pool, the
// traffic policy and who announces it (node, protocol, interfaces or
// peers). An IP nobody announces says so; one that two nodes claim (a
// moment during a failover, or a partition) lists both.
func Render(out io.Writer, svcs []corev1.Service, anns []v1beta1.ServiceAnnouncement) error {
	return renderText(out, Build(svcs, anns))
}

func renderText(out io.Writer, sts []ServiceStatus) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSERVICE\tIP\tPOOL\tPOLICY\tANNOUNCED BY")
	for _, s := range sts {
		if s.Forwarding == "dsr" {
			s.Policy += "+dsr"
		}
		pool := s.Pool
		if pool == "" {
			pool = "-"
		}
		if len(s.Addresses) == 0 {
			why := pendingNoClassText
			if strings.HasPrefix(s.Pending, "loadBalancerClass ") {
				why = "<pending> (" + s.Pending + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, why, pool, s.Policy, "-")
			continue
		}
		for _, a := range s.Addresses {
			text := announcersText(a.AnnouncedBy)
			switch {
			case a.Problem == ProblemNobody:
				text = textNobody
			case strings.HasPrefix(a.Problem, "nobody announces it: "):
				text = "nobody: " + strings.TrimPrefix(a.Problem, "nobody announces it: ")
			case a.Problem == ProblemTwoOverL2:
				text += textMoreThanOneL2
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, a.IP, pool, s.Policy, text)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range sts {
		for _, p := range s.ForwardingProblems {
			if _, err := fmt.Fprintf(out, "%s/%s: DSR on %s\n", s.Namespace, s.Name, p); err != nil {
				return err
			}
		}
	}
	if len(sts) == 0 {
		_, err := fmt.Fprintln(out, "no LoadBalancer Services")
		return err
	}
	return nil
}

// writeData writes v as JSON (indented) or YAML, as -o asks.
func writeData(out io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}
