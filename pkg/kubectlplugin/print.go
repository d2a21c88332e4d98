package kubectlplugin

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
)

// Printer writes reports as titled tables with cli-runtime's table printer,
// kubectl's: a table's wide columns show only with -o wide.
type Printer struct {
	Out io.Writer
	// Now is what ages are counted from.
	Now time.Time
	// Wide shows the wide columns too (priority 1), as kubectl's -o wide.
	Wide bool
}

// age is how long ago t was, as kubectl prints ages ("5m2s"), or "<none>".
func (p *Printer) age(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return duration.HumanDuration(p.Now.Sub(t.Time))
}

// columns are columns every table output shows (priority 0).
func columns(names ...string) []metav1.TableColumnDefinition { return definitions(0, names) }

// wideColumns are columns only -o wide shows (priority 1, as kubectl's).
func wideColumns(names ...string) []metav1.TableColumnDefinition { return definitions(1, names) }

func definitions(priority int32, names []string) []metav1.TableColumnDefinition {
	defs := make([]metav1.TableColumnDefinition, len(names))
	for i, n := range names {
		defs[i] = metav1.TableColumnDefinition{Name: n, Type: "string", Priority: priority}
	}
	return defs
}

// table is a metav1.Table of text cells, the form cli-runtime prints.
type table struct{ metav1.Table }

// newTable returns an empty table of the column groups, in order. A
// table's wide columns come before its last one, a free text, so that
// they stay aligned.
func newTable(groups ...[]metav1.TableColumnDefinition) *table {
	return &table{metav1.Table{ColumnDefinitions: slices.Concat(groups...)}}
}

// add appends a row, one cell per column; an empty cell reads "-".
func (t *table) add(cells ...string) {
	row := metav1.TableRow{Cells: make([]any, len(cells))}
	for i, c := range cells {
		row.Cells[i] = cmp.Or(c, "-")
	}
	t.Rows = append(t.Rows, row)
}

// section is a titled table, and what its title says when it has no row.
type section struct {
	title string
	table *table
	empty string
}

// print writes the section: its title, then its table indented under it
// so that titles and headers, both capitals, are told apart, then a blank
// line.
func (p *Printer) print(s section) error {
	if _, err := fmt.Fprintln(p.Out, s.title); err != nil {
		return err
	}
	if len(s.table.Rows) == 0 {
		_, err := fmt.Fprintf(p.Out, "  %s\n\n", s.empty)
		return err
	}
	var buf bytes.Buffer
	if err := printers.NewTablePrinter(printers.PrintOptions{Wide: p.Wide}).PrintObj(&s.table.Table, &buf); err != nil {
		return fmt.Errorf("printing %s: %w", s.title, err)
	}
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString("  " + line)
	}
	out.WriteString("\n")
	_, err := io.WriteString(p.Out, out.String())
	return err
}

// PrintStatus writes the status report as tables.
func (p *Printer) PrintStatus(st Status) error {
	notInstalled := "the fencing API (fenceline.io FencingRequests) is not installed"
	requestsEmpty, coverageEmpty := notInstalled, notInstalled
	if st.FencingAPI {
		requestsEmpty, coverageEmpty = "none", "no FencePolicy"
	}
	fencesEmpty := cmp.Or(st.StorageFencesNote, "none reported (drivers that list their fences publish them)")
	for _, s := range []section{
		{"CSI DRIVERS", p.driversTable(st.Drivers), "no CSIDriver objects"},
		{"NODES", p.nodesTable(st.Nodes), "no node is quarantined, fenced or out of service"},
		{"FENCING REQUESTS", p.requestsTable(st.FencingRequests), requestsEmpty},
		{"FENCE COVERAGE", coverageTable(st.Coverage), coverageEmpty},
		{"PENDING DETACHES", p.detachesTable(st.Detaches), "none"},
		{"STORAGE FENCES", p.storageFencesTable(st.StorageFences), fencesEmpty},
		{"RECENT EVENTS", p.eventsTable(st.Events), "none"},
	} {
		if err := p.print(s); err != nil {
			return err
		}
	}
	return nil
}

func (p *Printer) driversTable(drivers []DriverStatus) *table {
	t := newTable(columns("Name", "Attach", "Safe-Detach", "Unpublish-Fence", "Attacher", "Fence-Served"),
		wideColumns("Heartbeat", "Renewed", "Attachments"), columns("Missing"))
	for _, d := range drivers {
		renewed := ""
		if d.Heartbeat != "" {
			renewed = p.age(d.Renewed)
		}
		t.add(d.Name, yesNo(d.AttachRequired), yesNo(d.SafeDetach), d.UnpublishFence, d.AttacherVersion, yesNo(d.Serving),
			d.Heartbeat, renewed, strconv.Itoa(d.VolumeAttachments), d.Missing)
	}
	return t
}

func (p *Printer) nodesTable(nodes []NodeStatus) *table {
	t := newTable(columns("Node", "Ready", "Cut-Off"), wideColumns("Internal-IP", "Boot-ID", "Kind"), columns("Mark", "Since", "Detail"))
	for _, n := range nodes {
		for _, m := range n.Marks {
			t.add(n.Name, n.Ready, n.CutOff, n.InternalIP, n.BootID, m.Kind, m.Name, p.age(m.Since), m.Detail)
		}
	}
	return t
}

func (p *Printer) requestsTable(requests []RequestStatus) *table {
	t := newTable(columns("Name", "Node", "Phase", "Reason", "Requester", "Age"), wideColumns("Policy", "Action", "UID"), columns("Message"))
	for _, r := range requests {
		t.add(r.Name, r.Node, r.Phase, r.Reason, r.Requester, p.age(&r.Created), r.Policy, r.Action, string(r.UID), joinNonEmpty("; ", r.Message, r.Ask))
	}
	return t
}

// coverageTable has a row per node a policy cannot fence now, and one per
// policy that covers every node it selects (or whose coverage nobody
// wrote: fence-coverage is not running).
func coverageTable(coverage []CoverageStatus) *table {
	t := newTable(columns("Policy", "Covered"), wideColumns("Up-To-Date"), columns("Node", "Reason", "Message"))
	for _, c := range coverage {
		counts := fmt.Sprintf("%d/%d", c.Selected-c.Uncovered, c.Selected)
		upToDate := yesNo(c.UpToDate)
		if c.Paused {
			c.Policy += " (paused: no automatic fence)"
		}
		switch {
		case !c.Known:
			t.add(c.Policy, "unknown", "", "", "", "no coverage written: is fenceline-controller's fence-coverage running?")
		case len(c.Nodes) == 0:
			t.add(c.Policy, counts, upToDate, "", "", "every selected node can be fenced")
		}
		for _, n := range c.Nodes {
			t.add(c.Policy, counts, upToDate, n.Node, n.Reason, n.Message)
		}
		if listed := int32(len(c.Nodes)); c.Uncovered > listed {
			t.add(c.Policy, counts, upToDate, fmt.Sprintf("(%d more)", c.Uncovered-listed), "", "kubectl get fencepolicy "+c.Policy+" -o yaml lists the first 50")
		}
	}
	return t
}

func (p *Printer) detachesTable(detaches []DetachStatus) *table {
	t := newTable(columns("VolumeAttachment", "Driver", "Node", "PV", "Age", "Mode"), wideColumns("Attached"), columns("Detail"))
	for _, d := range detaches {
		t.add(d.Name, d.Driver, d.Node, d.PV, p.age(d.Since), d.Mode, yesNo(d.Attached), d.Detail)
	}
	return t
}

func (p *Printer) storageFencesTable(fences []StorageFenceStatus) *table {
	t := newTable(wideColumns("Name"), columns("Driver", "Node", "Node-ID", "Fenced-Off", "Listed", "Lift"))
	for _, f := range fences {
		t.add(f.Name, f.Driver, orUnknown(f.Node), f.NodeID, f.Fenced, p.age(f.Listed), f.Lift)
	}
	return t
}

func (p *Printer) eventsTable(events []EventStatus) *table {
	t := newTable(columns("Last", "Type", "Reason"), wideColumns("Namespace"), columns("Object", "Component"),
		wideColumns("Count", "First"), columns("Message"))
	for _, e := range events {
		t.add(p.age(&e.Last), e.Type, e.Reason, e.Namespace, e.Object, e.Component, strconv.Itoa(int(e.Count)), p.age(e.First), e.Message)
	}
	return t
}

// PrintExplanation writes explain's verdicts as a table. It has no wide
// column: a verdict is its four columns.
func (p *Printer) PrintExplanation(e Explanation) error {
	t := newTable(columns("Controller", "Object", "Decision", "Why"))
	for _, v := range e.Verdicts {
		t.add(v.Controller, v.Object, v.Decision, v.Why)
	}
	return p.print(section{fmt.Sprintf("NODE %s: what each controller would decide now", e.Node), t, "nothing to decide"})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
