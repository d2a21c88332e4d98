package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"
)

// run runs the plugin with args on the fake clients and stdin.
func run(t *testing.T, c Clients, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := &Options{
		Flags:      genericclioptions.NewConfigFlags(false),
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut},
		Now:        func() time.Time { return now },
		NewClients: func() (Clients, error) { return c, nil },
	}
	cmd := NewCommand(o)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		stdin   string
		wantErr string
		check   func(t *testing.T, out, errOut string)
		wantFRs int
	}{
		{name: "status -o json", args: []string{"status", "-o", "json"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			var st Status
			if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 1 || !st.FencingAPI {
				t.Errorf("status -o json = %v (%s), want one node and the fencing API", err, out)
			}
		}},
		{name: "explain -o yaml", args: []string{"explain", "dead", "-o", "yaml"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			var e Explanation
			if err := yaml.Unmarshal([]byte(out), &e); err != nil || e.Node != "dead" || len(e.Verdicts) == 0 {
				t.Errorf("explain -o yaml = %v (%s), want node dead's verdicts", err, out)
			}
		}},
		{name: "version --client", args: []string{"version", "--client"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if !strings.HasPrefix(out, "kubectl-fenceline dev (commit ") || strings.Contains(out, "fenceline-attacher of") {
				t.Errorf("version --client = %q, want the plugin's version only", out)
			}
		}},
		{name: "--version", args: []string{"--version"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if !strings.HasPrefix(out, "kubectl-fenceline dev (commit ") || !strings.HasSuffix(out, runtime.Version()+")\n") {
				t.Errorf("--version = %q, want the plugin's name, version, commit and Go version on one line", out)
			}
		}},
		{name: "version", args: []string{"version"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if !strings.Contains(out, "fenceline-attacher of block.csi.example.com:") || !strings.Contains(out, "fenceline-controller: no leader-election Lease found") {
				t.Errorf("version = %q, want the attacher's version and the controller's (none here) too", out)
			}
		}},
		{name: "status -o wide", args: []string{"status", "-o", "wide"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if !strings.Contains(out, "BOOT-ID") || !strings.Contains(out, "10.0.0.7") {
				t.Errorf("status -o wide = %s, want the nodes' wide columns", out)
			}
		}},
		{name: "status -o jsonpath", args: []string{"status", "-o", "jsonpath={.nodes[*].name} {.fencingRequests[*].uid}"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if out != "dead uid-req-dead" {
				t.Errorf("status -o jsonpath = %q, want the node and the request's UID", out)
			}
		}},
		{name: "explain --template", args: []string{"explain", "dead", "--template", "{{.node}} at {{.now}}"}, wantFRs: 1, check: func(t *testing.T, out, _ string) {
			if out != "dead at 2026-01-02T03:09:05Z" {
				t.Errorf("explain --template = %q, want a go-template of the report, as -o go-template", out)
			}
		}},
		{name: "fence --yes --wait=false", args: []string{"fence", "live", "--yes", "--requester", "alice", "--wait=false"}, wantFRs: 2, check: func(t *testing.T, out, errOut string) {
			if !strings.Contains(out, "created: node-fencing fences node live") || !strings.Contains(out, "not waiting: follow it with kubectl get fencingrequest") || errOut != "" {
				t.Errorf("fence --yes printed %q, asked %q; want the created request, how to follow it and no question", out, errOut)
			}
		}},
		{name: "fence asks, answer yes", args: []string{"fence", "live", "--wait=false"}, stdin: "y\n", wantFRs: 2, check: func(t *testing.T, _, errOut string) {
			if !strings.Contains(errOut, "Fence node live") {
				t.Errorf("fence asked %q, want the question", errOut)
			}
		}},
		{name: "fence waits for node-fencing, which does not act", args: []string{"fence", "live", "--yes", "--timeout", "20ms"}, wantFRs: 2, wantErr: "timed out after 20ms waiting for node-fencing to fence node live", check: func(t *testing.T, _, errOut string) {
			if !strings.Contains(errOut, "waiting up to 20ms for node-fencing to fence node live") {
				t.Errorf("fence said %q while waiting, want what it waits for", errOut)
			}
		}},
		{name: "unfence with a bad verification", args: []string{"unfence", "dead", "--yes", "--verified", "yes"}, wantFRs: 1, wantErr: "--verified must be off or rebooted"},
		{name: "fence asks, answer no", args: []string{"fence", "live"}, stdin: "n\n", wantFRs: 1, wantErr: ErrAborted.Error()},
		{name: "fence asks, no stdin", args: []string{"fence", "live"}, wantFRs: 1, wantErr: "use --yes"},
		{name: "fence with a bad action", args: []string{"fence", "live", "--action", "Cycle", "--yes"}, wantFRs: 1, wantErr: "--action must be Off or Reboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, f := fakeClients(world())
			out, errOut, err := run(t, c, tc.stdin, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			if tc.check != nil {
				tc.check(t, out, errOut)
			}
			reqs, err := f.FencingV1alpha1().FencingRequests().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs.Items) != tc.wantFRs {
				t.Errorf("%d FencingRequests after %v, want %d", len(reqs.Items), tc.args, tc.wantFRs)
			}
		})
	}
}

// A bad -o fails before the plugin reads anything, with the formats it
// takes; -o name is not one: a report has no name.
func TestBadOutputFormat(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"status", "-o", "xml"}, `unknown output format "xml": -o takes one of go-template, go-template-file, json, jsonpath, jsonpath-as-json, jsonpath-file, kyaml, template, templatefile, wide, yaml, or nothing for tables`},
		{[]string{"explain", "dead", "-o", "name"}, `unknown output format "name"`},
		{[]string{"status", "-o", "jsonpath"}, `output format "jsonpath": template format specified but no template given`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, k, f := fakeClients(world())
			_, _, err := run(t, c, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if reads := len(k.Actions()) + len(f.Actions()); reads != 0 {
				t.Errorf("%d requests before the error, want none", reads)
			}
		})
	}
}
