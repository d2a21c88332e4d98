package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Printer writes reports as aligned tables, in kubectl's style.
type Printer struct {
	Out io.Writer
	// Now is what ages are counted from.
	Now time.Time
}

// age is how long ago t was, as kubectl prints ages ("5m2s"), or "<none>".
func (p *Printer) age(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return duration.HumanDuration(p.Now.Sub(t.Time))
}

// table writes a titled table; rows are tab-separated.
func (p *Printer) table(title, header string, rows []string, empty string) error {
	if _, err := fmt.Fprintln(p.Out, title); err != nil {
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(p.Out, "  %s\n\n", empty)
		return err
	}
	w := tabwriter.NewWriter(p.Out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  "+header)
	for _, r := range rows {
		fmt.Fprintln(w, "  "+r)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(p.Out)
	return err
}

func row(cells ...string) string {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	return strings.Join(cells, "\t")
}

// PrintStatus writes the status report as tables.
func (p *Printer) PrintStatus(st Status) error {
	var rows []string
	for _, d := range st.Drivers {
		rows = append(rows, row(d.Name, yesNo(d.AttachRequired), yesNo(d.SafeDetach), d.UnpublishFence, d.AttacherVersion, yesNo(d.Serving), d.Missing))
	}
	if err := p.table("CSI DRIVERS", "NAME\tATTACH\tSAFE-DETACH\tUNPUBLISH-FENCE\tATTACHER\tFENCE-SERVED\tMISSING", rows, "no CSIDriver objects"); err != nil {
		return err
	}
	rows = nil
	for _, n := range st.Nodes {
		for _, m := range n.Marks {
			rows = append(rows, row(n.Name, n.Ready, n.CutOff, m.Name, p.age(m.Since), m.Detail))
		}
	}
	if err := p.table("NODES", "NODE\tREADY\tCUT-OFF\tMARK\tSINCE\tDETAIL", rows, "no node is quarantined, fenced or out of service"); err != nil {
		return err
	}
	rows = nil
	for _, r := range st.FencingRequests {
		rows = append(rows, row(r.Name, r.Node, r.Phase, r.Reason, r.Requester, p.age(&r.Created), joinNonEmpty("; ", r.Message, r.Ask)))
	}
	empty := "none"
	if !st.FencingAPI {
		empty = "the fencing API (fenceline.io FencingRequests) is not installed"
	}
	if err := p.table("FENCING REQUESTS", "NAME\tNODE\tPHASE\tREASON\tREQUESTER\tAGE\tMESSAGE", rows, empty); err != nil {
		return err
	}
	if err := p.printCoverage(st, empty); err != nil {
		return err
	}
	rows = nil
	for _, d := range st.Detaches {
		rows = append(rows, row(d.Name, d.Driver, d.Node, d.PV, p.age(d.Since), d.Mode, d.Detail))
	}
	if err := p.table("PENDING DETACHES", "VOLUMEATTACHMENT\tDRIVER\tNODE\tPV\tAGE\tMODE\tDETAIL", rows, "none"); err != nil {
		return err
	}
	rows = nil
	for _, f := range st.StorageFences {
		rows = append(rows, row(f.Driver, orUnknown(f.Node), f.NodeID, f.Fenced, p.age(f.Listed), f.Lift))
	}
	empty = "none reported (drivers that list their fences publish them)"
	if st.StorageFencesNote != "" {
		empty = st.StorageFencesNote
	}
	if err := p.table("STORAGE FENCES", "DRIVER\tNODE\tNODE-ID\tFENCED-OFF\tLISTED\tLIFT", rows, empty); err != nil {
		return err
	}
	rows = nil
	for _, e := range st.Events {
		rows = append(rows, row(p.age(&e.Last), e.Type, e.Reason, e.Object, e.Component, e.Message))
	}
	return p.table("RECENT EVENTS", "LAST\tTYPE\tREASON\tOBJECT\tCOMPONENT\tMESSAGE", rows, "none")
}

// printCoverage writes a row per node a policy cannot fence now, and one
// per policy that covers every node it selects (or whose coverage nobody
// wrote: fence-coverage is not running).
func (p *Printer) printCoverage(st Status, empty string) error {
	var rows []string
	for _, c := range st.Coverage {
		counts := fmt.Sprintf("%d/%d", c.Selected-c.Uncovered, c.Selected)
		if c.Paused {
			c.Policy += " (paused: no automatic fence)"
		}
		switch {
		case !c.Known:
			rows = append(rows, row(c.Policy, "unknown", "", "", "no coverage written: is fenceline-controller's fence-coverage running?"))
		case len(c.Nodes) == 0:
			rows = append(rows, row(c.Policy, counts, "", "", "every selected node can be fenced"))
		}
		for _, n := range c.Nodes {
			rows = append(rows, row(c.Policy, counts, n.Node, n.Reason, n.Message))
		}
		if listed := int32(len(c.Nodes)); c.Uncovered > listed {
			rows = append(rows, row(c.Policy, counts, fmt.Sprintf("(%d more)", c.Uncovered-listed), "", "kubectl get fencepolicy "+c.Policy+" -o yaml lists the first 50"))
		}
	}
	if !st.FencingAPI {
		return p.table("FENCE COVERAGE", "POLICY	COVERED	NODE	REASON	MESSAGE", nil, empty)
	}
	return p.table("FENCE COVERAGE", "POLICY	COVERED	NODE	REASON	MESSAGE", rows, "no FencePolicy")
}

// PrintExplanation writes explain's verdicts as a table.
func (p *Printer) PrintExplanation(e Explanation) error {
	rows := make([]string, 0, len(e.Verdicts))
	for _, v := range e.Verdicts {
		rows = append(rows, row(v.Controller, v.Object, v.Decision, v.Why))
	}
	title := fmt.Sprintf("NODE %s: what each controller would decide now", e.Node)
	return p.table(title, "CONTROLLER\tOBJECT\tDECISION\tWHY", rows, "nothing to decide")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// WriteStructured writes v as "json" or "yaml".
func WriteStructured(out io.Writer, format string, v any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = out.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q: want json or yaml (or none for tables)", format)
}
