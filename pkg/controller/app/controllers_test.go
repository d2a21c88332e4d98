package app

import (
	"flag"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/controller/tainteviction"
)

func TestEnabledControllers(t *testing.T) {
	tests := []struct {
		name    string
		spec    []string
		want    []string
		wantErr bool
	}{
		{"star enables the default set", []string{"*"}, []string{"fence-coverage", "force-eviction", "node-fencing", "node-gone", "podgc", "quarantine"}, false},
		{"star minus one", []string{"*", "-quarantine"}, []string{"fence-coverage", "force-eviction", "node-fencing", "node-gone", "podgc"}, false},
		{"star plus opt-in", []string{"*", "out-of-service-taint-removal"}, []string{"fence-coverage", "force-eviction", "node-fencing", "node-gone", "out-of-service-taint-removal", "podgc", "quarantine"}, false},
		{"explicit list only", []string{"podgc"}, []string{"podgc"}, false},
		{"blanks ignored", []string{" podgc ", ""}, []string{"podgc"}, false},
		{"nothing", nil, []string{}, false},
		{"unknown name", []string{"*", "gc"}, nil, true},
		{"unknown disabled name", []string{"-gc"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnabledControllers(tc.spec, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			names := slices.Sorted(maps.Keys(got))
			if !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
}

// TestControllerTable checks the table every use of --controllers derives
// from: unique names that are valid user agent parts, a constructor each,
// gates that exist, and a help text that names them all.
func TestControllerTable(t *testing.T) {
	seen := map[string]bool{}
	help := ControllersHelp()
	for _, d := range Controllers {
		switch {
		case d.Name == "" || strings.ContainsAny(d.Name, " /,*") || strings.HasPrefix(d.Name, "-"):
			t.Errorf("controller name %q is not a valid --controllers item and user agent part", d.Name)
		case seen[d.Name]:
			t.Errorf("controller %q listed twice", d.Name)
		case d.New == nil:
			t.Errorf("controller %q has no constructor", d.Name)
		case d.FeatureGate != "" && FeatureGates[d.FeatureGate] == (featuregate.FeatureSpec{}):
			t.Errorf("controller %q needs gate %q, which FeatureGates does not declare", d.Name, d.FeatureGate)
		case !strings.Contains(help, d.Name):
			t.Errorf("--controllers help lacks %q: %s", d.Name, help)
		}
		seen[d.Name] = true
		if got, want := UserAgent(d.Name), "fenceline-controller/"+d.Name; got != want {
			t.Errorf("UserAgent(%q) = %q, want %q", d.Name, got, want)
		}
	}
	if got, want := DisabledByDefault(), []string{"remediation", "out-of-service-taint-removal"}; !slices.Equal(got, want) {
		t.Errorf("DisabledByDefault() = %v, want %v", got, want)
	}
}

// TestEnabledControllersFeatureGate resolves --controllers over a table
// with a gated controller: "*" enables it only with its gate on, and
// naming it with the gate off is an error rather than silently nothing.
func TestEnabledControllersFeatureGate(t *testing.T) {
	const gated featuregate.Feature = "GatedController"
	table := []Descriptor{
		{Name: "plain", EnabledByDefault: true},
		{Name: "beta", EnabledByDefault: true, FeatureGate: gated},
		{Name: "opt-in"},
	}
	gate := func(on bool) featuregate.FeatureGate {
		g := featuregate.NewFeatureGate()
		if err := g.Add(map[featuregate.Feature]featuregate.FeatureSpec{gated: {Default: false, PreRelease: featuregate.Alpha}}); err != nil {
			t.Fatal(err)
		}
		if err := g.SetFromMap(map[string]bool{string(gated): on}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	tests := []struct {
		name    string
		spec    []string
		gate    featuregate.FeatureGate
		want    []string
		wantErr string
	}{
		{"star, gate on", []string{"*"}, gate(true), []string{"beta", "plain"}, ""},
		{"star, gate off", []string{"*"}, gate(false), []string{"plain"}, ""},
		{"star, no gate", []string{"*"}, nil, []string{"plain"}, ""},
		{"named, gate on", []string{"beta", "opt-in"}, gate(true), []string{"beta", "opt-in"}, ""},
		{"named, gate off", []string{"beta"}, gate(false), nil, "--feature-gates=GatedController=true"},
		{"disabled, gate off", []string{"*", "-beta"}, gate(false), []string{"plain"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := enabledControllers(table, tc.spec, tc.gate)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"workers=0":          func(o *Options) { o.Workers = 0 },
		"negative delay":     func(o *Options) { o.Settings[quarantine.Name].(*quarantine.Settings).Delay = -1 },
		"unknown controller": func(o *Options) { o.Controllers = []string{"nope"} },
		"zero resync":        func(o *Options) { o.Resync = 0 },
		"zero qps":           func(o *Options) { o.KubeAPIQPS = 0 },
		"renew deadline above lease duration": func(o *Options) {
			o.LeaderElection, o.LeaseDuration, o.RenewDeadline = true, 5e9, 10e9
		},
		"leader election without namespace": func(o *Options) { o.LeaderElection, o.LeaderElectionNamespace = true, "" },
	} {
		bad := DefaultOptions()
		mutate(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

// TestControllerSettingsFlags: every controller's own flags join the
// command line once (a duplicate name would panic), with their defaults,
// and a bad value is reported under the controller's name.
func TestControllerSettingsFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("fenceline-controller", flag.ContinueOnError)
	o.AddControllerFlags(fs)
	for _, name := range []string{"quarantine-delay", "quarantine-lift-delay", "force-eviction-ready-grace", "taint-eviction-rate", "taint-eviction-zone-label"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is not defined", name)
		}
	}
	if err := fs.Parse([]string{"--quarantine-delay=3s", "--force-eviction-ready-grace=-1s"}); err != nil {
		t.Fatal(err)
	}
	if d := o.Settings[quarantine.Name].(*quarantine.Settings).Delay; d != 3*time.Second {
		t.Errorf("quarantine delay %v after --quarantine-delay=3s", d)
	}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "force-eviction: --force-eviction-ready-grace must not be negative") {
		t.Errorf("Validate = %v, want the negative grace named under force-eviction", err)
	}
}

// Each enabled controller's own metrics are created once, registered under
// its name and handed to it; a disabled controller registers none.
func TestControllerMetrics(t *testing.T) {
	families := func(reg *prometheus.Registry) []string {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			out = append(out, mf.GetName())
		}
		return out
	}
	reg := prometheus.NewRegistry()
	own, err := controllerMetrics(Controllers, map[string]bool{quarantine.Name: true, podgc.Name: true}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(own)); !slices.Equal(got, []string{quarantine.Name}) {
		t.Errorf("controllers with metrics = %v, want [quarantine] (podgc has none of its own, the others are off)", got)
	}
	cc := ControllerContext{Metrics: own[quarantine.Name]}
	if metricsOf[*quarantine.Metrics](cc) == nil {
		t.Error("quarantine's context does not carry its metrics")
	}
	if metricsOf[*nodefencing.Metrics](cc) != nil {
		t.Error("another controller's metrics type matched")
	}
	if metricsOf[*nodefencing.Metrics](ControllerContext{}) != nil {
		t.Error("a context without metrics gave some")
	}
	// Gauges appear at once; the node-fencing ones must not.
	got := families(reg)
	if !slices.Contains(got, "fenceline_controller_quarantined_nodes") {
		t.Errorf("families %v lack quarantine's fenceline_controller_quarantined_nodes", got)
	}
	for _, name := range got {
		if strings.HasPrefix(name, "fenceline_node_fencing_") || strings.HasPrefix(name, "fenceline_taint_eviction_") {
			t.Errorf("family %s of a disabled controller is registered", name)
		}
	}
	if _, err := controllerMetrics(Controllers, map[string]bool{quarantine.Name: true}, reg); err == nil || !strings.Contains(err.Error(), quarantine.Name) {
		t.Errorf("registering twice: error %v, want one naming %s", err, quarantine.Name)
	}
	// Every descriptor's metrics register side by side.
	if _, err := controllerMetrics(Controllers, map[string]bool{nodefencing.Name: true, tainteviction.Name: true, quarantine.Name: true}, prometheus.NewRegistry()); err != nil {
		t.Errorf("registering every controller's metrics: %v", err)
	}
}
