package kubectlplugin

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
)

// headers reads printed tables: the column names of each section's header
// (the line under its title), by title.
func headers(out string) map[string][]string {
	h := map[string][]string{}
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if title := lines[i]; title != "" && !strings.HasPrefix(title, " ") {
			h[title] = strings.Fields(lines[i+1])
		}
	}
	return h
}

// -o wide adds exactly each table's wide columns, where they belong; the
// default output has none of them.
func TestPrintWideColumns(t *testing.T) {
	st := BuildStatus(readWorld(t), 20)
	kube, fenceObjs := world()
	e := explainWorld(t, kube, fenceObjs, "dead")
	printed := func(wide bool) map[string][]string {
		var out bytes.Buffer
		p := &Printer{Out: &out, Now: now, Wide: wide}
		if err := p.PrintStatus(st); err != nil {
			t.Fatal(err)
		}
		if err := p.PrintExplanation(e); err != nil {
			t.Fatal(err)
		}
		return headers(out.String())
	}
	plain, wide := printed(false), printed(true)
	cases := []struct {
		title string
		// want is the header with -o wide; the wide columns are in wide.
		want, wide []string
	}{
		{title: "CSI DRIVERS", want: []string{"NAME", "ATTACH", "SAFE-DETACH", "UNPUBLISH-FENCE", "ATTACHER", "FENCE-SERVED", "HEARTBEAT", "RENEWED", "ATTACHMENTS", "MISSING"},
			wide: []string{"HEARTBEAT", "RENEWED", "ATTACHMENTS"}},
		{title: "NODES", want: []string{"NODE", "READY", "CUT-OFF", "INTERNAL-IP", "BOOT-ID", "KIND", "MARK", "SINCE", "DETAIL"},
			wide: []string{"INTERNAL-IP", "BOOT-ID", "KIND"}},
		{title: "FENCING REQUESTS", want: []string{"NAME", "NODE", "PHASE", "REASON", "REQUESTER", "AGE", "POLICY", "ACTION", "UID", "MESSAGE"},
			wide: []string{"POLICY", "ACTION", "UID"}},
		{title: "FENCE COVERAGE", want: []string{"POLICY", "COVERED", "UP-TO-DATE", "NODE", "REASON", "MESSAGE"}, wide: []string{"UP-TO-DATE"}},
		{title: "PENDING DETACHES", want: []string{"VOLUMEATTACHMENT", "DRIVER", "NODE", "PV", "AGE", "MODE", "ATTACHED", "DETAIL"}, wide: []string{"ATTACHED"}},
		{title: "STORAGE FENCES", want: []string{"NAME", "DRIVER", "NODE", "NODE-ID", "FENCED-OFF", "LISTED", "LIFT"}, wide: []string{"NAME"}},
		{title: "RECENT EVENTS", want: []string{"LAST", "TYPE", "REASON", "NAMESPACE", "OBJECT", "COMPONENT", "COUNT", "FIRST", "MESSAGE"},
			wide: []string{"NAMESPACE", "COUNT", "FIRST"}},
		{title: "NODE dead: what each controller would decide now", want: []string{"CONTROLLER", "OBJECT", "DECISION", "WHY"}},
	}
	if len(wide) != len(cases) {
		t.Errorf("sections %v, want a case for each", slices.Sorted(maps.Keys(wide)))
	}
	for _, tc := range cases {
		t.Run(tc.title, func(t *testing.T) {
			if got := wide[tc.title]; !slices.Equal(got, tc.want) {
				t.Errorf("-o wide header = %v, want %v", got, tc.want)
			}
			want := slices.DeleteFunc(slices.Clone(tc.want), func(c string) bool { return slices.Contains(tc.wide, c) })
			if got := plain[tc.title]; !slices.Equal(got, want) {
				t.Errorf("default header = %v, want %v (no wide column)", got, want)
			}
		})
	}
}
