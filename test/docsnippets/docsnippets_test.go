package docsnippets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// planned is one distinct command (a file and a text) with the table entry
// that classifies it.
type planned struct {
	Command       // its first occurrence
	lines   []int // every line of the file where it occurs
	entry   *entry
}

// name is the command's subtest name: where it is and how it starts.
func (p *planned) name() string {
	first, _, _ := strings.Cut(p.Text, "\n")
	return fmt.Sprintf("%s:%d %s", p.File, p.Line, first)
}

// where is every place the command occurs.
func (p *planned) where() string {
	var l []string
	for _, n := range p.lines {
		l = append(l, fmt.Sprint(n))
	}
	return p.File + ":" + strings.Join(l, ",")
}

// placeholder matches what is left of a placeholder after substitution.
var placeholder = regexp.MustCompile(`<[a-z][a-z -]*>`)

// docCommands extracts the commands of README.md and docs/*.md.
func docCommands(t testing.TB) (root string, cmds []Command) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, err = Extract(root, files); err != nil {
		t.Fatal(err)
	}
	return root, cmds
}

// classify matches the commands with the table and the substitutions. It
// returns one planned command per distinct command, in document order, and
// every mismatch: a command in no entry, an entry (or a substitution) that
// matches nothing, a command that would run with a placeholder unfilled.
func classify(cmds []Command) ([]*planned, []string) {
	byID := map[string]*planned{}
	var plan []*planned
	for _, c := range cmds {
		if p := byID[c.ID()]; p != nil {
			p.lines = append(p.lines, c.Line)
			continue
		}
		p := &planned{Command: c, lines: []int{c.Line}}
		byID[c.ID()] = p
		plan = append(plan, p)
	}
	var problems []string
	for i := range table {
		e := &table[i]
		if e.skip == "" && (e.phase != inDocOrder || e.stdin != "") && e.why == "" {
			problems = append(problems, fmt.Sprintf("table entry for %s %q runs out of document order or with input without saying why", e.file, e.cmds))
		}
		for _, text := range e.cmds {
			switch p := byID[e.file+": "+text]; {
			case p == nil:
				problems = append(problems, fmt.Sprintf("table entry matches no command of %s any more: %s", e.file, text))
			case p.entry != nil:
				problems = append(problems, fmt.Sprintf("%s: classified twice: %s", p.where(), text))
			default:
				p.entry = e
			}
		}
	}
	used := map[string]bool{}
	for _, p := range plan {
		if p.entry == nil {
			problems = append(problems, fmt.Sprintf("%s: a command no table entry runs or skips; add it to table (file %q):\n\t%#q", p.where(), p.File, p.Text))
			continue
		}
		if !p.entry.runs() {
			continue
		}
		text := p.Text
		for _, s := range substitutions {
			if next := substitute(text, s.placeholder, "X"); next != text {
				used[s.placeholder], text = true, next
			}
		}
		if m := placeholder.FindString(text); m != "" {
			problems = append(problems, fmt.Sprintf("%s: runs with the placeholder %s, which no substitution fills: %s", p.where(), m, p.Text))
		}
	}
	for _, s := range substitutions {
		if !used[s.placeholder] {
			problems = append(problems, fmt.Sprintf("substitution %s fills no command that runs", s.placeholder))
		}
	}
	return plan, problems
}

// substitute replaces placeholder in text by value: anywhere for one in
// angle brackets, as a whole word (a name or path, not part of a longer
// one) otherwise.
func substitute(text, placeholder, value string) string {
	pre, post := "", ""
	if isNameByte(placeholder[0]) {
		pre = `(^|[^A-Za-z0-9_.-])`
	}
	if isNameByte(placeholder[len(placeholder)-1]) {
		post = `($|[^A-Za-z0-9_.-])`
	}
	if pre == "" && post == "" {
		return strings.ReplaceAll(text, placeholder, value)
	}
	expr := `(?m)` + pre + `(` + regexp.QuoteMeta(placeholder) + `)` + post
	re, ok := wordPlaceholders.Load(expr)
	if !ok {
		re, _ = wordPlaceholders.LoadOrStore(expr, regexp.MustCompile(expr))
	}
	return re.(*regexp.Regexp).ReplaceAllStringFunc(text, func(m string) string {
		return strings.Replace(m, placeholder, value, 1)
	})
}

// wordPlaceholders holds the compiled expressions of substitute, by
// expression: each is used for every command, in classify and in run.
var wordPlaceholders sync.Map

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// TestSnippetsClassified holds the table to the documents, without a
// cluster (so that make test-unit catches a new snippet): every command is
// run or skipped by exactly one entry, every entry and substitution still
// matches, and no command runs with a placeholder unfilled.
func TestSnippetsClassified(t *testing.T) {
	_, cmds := docCommands(t)
	plan, problems := classify(cmds)
	for _, p := range problems {
		t.Error(p)
	}
	runs, checked, skips := 0, 0, map[string]int{}
	for _, p := range plan {
		switch {
		case p.entry == nil:
		case p.entry.skip == "":
			runs++
		default:
			skips[p.entry.skip]++
			if p.entry.checkLogs {
				checked++
			}
		}
	}
	t.Logf("%d commands, %d distinct: %d run, %d skipped (%d of them checked)", len(cmds), len(plan), runs, len(plan)-runs, checked)
	for _, reason := range slices.Sorted(maps.Keys(skips)) {
		t.Logf("  %2d skipped: %s", skips[reason], reason)
	}
}

// TestDocSnippets runs every command the table runs, for real, against one
// world: Fenceline installed by the README's own `kubectl apply -k
// deploy/`, with node fencing (a Redfish BMC and FenceTarget per node, the
// FencePolicy workers), two attacher replicas under leader election (as
// deploy/examples/mock-driver runs them), a StatefulSet db/web with one
// volume, and the objects of testdata/csi-hostpath.yaml for the migration.
// The fence transcript of kubectl-plugin.md then fences the workload's
// node, the rest run in document order, and the removal last. A command
// fails the test when it exits non-zero or prints kubectl's "error:".
func TestDocSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: needs a local control plane (not run with -short)")
	}
	root, cmds := docCommands(t)
	plan, problems := classify(cmds)
	if len(problems) > 0 {
		t.Fatalf("the table does not match the documents (see TestSnippetsClassified):\n%s", strings.Join(problems, "\n"))
	}
	sh, err := newShell(t, root)
	if err != nil {
		t.Fatal(err)
	}
	d := &docWorld{sh: sh, overlay: writeOverlay(t, root)}
	start := time.Now()
	d.w = world.Start(t, world.Options{
		Fencing:          true,
		AttacherReplicas: 2,
		Installer:        &snippetInstaller{d: d, cmds: inPhase(plan, install)},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	d.setUp(ctx, t)
	t.Logf("world ready in %.1fs", time.Since(start).Seconds())

	ran := len(inPhase(plan, install))
	for _, ph := range []phase{setup, inDocOrder, last} {
		for _, p := range inPhase(plan, ph) {
			ok := t.Run(p.name(), func(t *testing.T) {
				out, err := d.run(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("output:\n%s", truncate(out, 4096))
			})
			if !ok && ph == setup {
				t.Fatalf("%s failed: the commands after it read what it makes", p.where())
			}
			ran++
		}
	}
	t.Logf("ran or checked %d of %d distinct commands (%d occurrences in all) in %.1fs", ran, len(plan), len(cmds), time.Since(start).Seconds())
}

// inPhase returns the commands that run (or are checked) in phase, in
// document order.
func inPhase(plan []*planned, ph phase) []*planned {
	var out []*planned
	for _, p := range plan {
		if p.entry.runs() && p.entry.phase == ph {
			out = append(out, p)
		}
	}
	return out
}

// docWorld is what the commands run against.
type docWorld struct {
	sh      *shell
	w       *world.World
	fencing versioned.Interface
	// node is the workload's node, which the fence transcript fences.
	node string
	// overlay is the directory of deploy.md's my-fenceline overlay.
	overlay string
}

// setUp gives the installed world what the documents' commands look at:
// node fencing, the migration's driver and a workload with a volume.
func (d *docWorld) setUp(ctx context.Context, t *testing.T) {
	t.Helper()
	fencing, err := d.w.SetUpFencing(ctx, world.BMCRedfish, nil, func(p *fencingv1alpha1.FencePolicy) { p.Name = policyName })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fencing.Close)
	d.fencing = fencing.Client
	if out, err := d.sh.run(ctx, "kubectl apply -f test/docsnippets/testdata/csi-hostpath.yaml", "", defaultTimeout); err != nil {
		t.Fatalf("creating the migration's driver: %v\n%s", err, out)
	}
	if err := d.w.CreateNamespace(ctx, workloadNamespace); err != nil {
		t.Fatal(err)
	}
	if err := d.w.CreateStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.w.ProvisionStatefulSet(ctx, workloadNamespace, workloadSet, 1); err != nil {
		t.Fatal(err)
	}
	set := world.StatefulSet(workloadNamespace, workloadSet, 1)
	if _, err := d.w.Cluster.Client().AppsV1().StatefulSets(workloadNamespace).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := d.w.WaitRunning(ctx, workloadNamespace, workloadSet+"-0", "", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d.node = pod.Spec.NodeName
}

// truncate shortens out to at most n bytes, saying so.
func truncate(out []byte, n int) string {
	if len(out) <= n {
		return string(out)
	}
	return fmt.Sprintf("%s\n[%d more bytes]", out[:n], len(out)-n)
}

// run runs one command with its placeholders filled and returns its
// output; the error says where the documents hold it and what it printed.
func (d *docWorld) run(ctx context.Context, p *planned) ([]byte, error) {
	text := p.Text
	for _, s := range substitutions {
		if substitute(text, s.placeholder, "X") == text {
			continue
		}
		v, err := s.value(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("%s: filling %s (%s): %w", p.where(), s.placeholder, s.means, err)
		}
		text = substitute(text, s.placeholder, v)
	}
	timeout := p.entry.timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	if p.entry.checkLogs {
		return d.checkLogs(ctx, p, text, timeout)
	}
	out, err := d.sh.run(ctx, text, p.entry.stdin, timeout)
	if err != nil {
		ran := ""
		if text != p.Text {
			ran = "\nrun as:\n" + text
		}
		return out, fmt.Errorf("%s: the documented command fails: %w\n%s%s\noutput:\n%s", p.where(), err, p.Text, ran, out)
	}
	return out, nil
}

// logsCommand matches a kubectl logs command: its namespace flag, its pod
// or workload, and the container it names.
var logsCommand = regexp.MustCompile(`^kubectl (-n \S+ )?logs (\S+)(?: -c (\S+))?$`)

// checkLogs checks, in place of reading the logs, that the pod or
// workload a kubectl logs command (text, filled in) reads exists and has
// the container it names: a wrong container name is a doc error as much
// as a wrong flag.
func (d *docWorld) checkLogs(ctx context.Context, p *planned, text string, timeout time.Duration) ([]byte, error) {
	m := logsCommand.FindStringSubmatch(text)
	if m == nil {
		return nil, fmt.Errorf("%s: not a kubectl logs command this test can check: %s", p.where(), p.Text)
	}
	target := m[2]
	if !strings.Contains(target, "/") {
		target = "pod/" + target // kubectl logs takes a bare pod name
	}
	get := fmt.Sprintf("kubectl %sget %s -o jsonpath='{.spec.containers[*].name}{.spec.template.spec.containers[*].name}'", m[1], target)
	out, err := d.sh.run(ctx, get, "", timeout)
	if err != nil {
		return out, fmt.Errorf("%s: what the documented command reads does not exist: %w\n%s\nchecked with:\n%s\noutput:\n%s", p.where(), err, p.Text, get, out)
	}
	containers := strings.Fields(string(out))
	if len(containers) == 0 || m[3] != "" && !slices.Contains(containers, m[3]) {
		return out, fmt.Errorf("%s: the documented command names container %q, %s has %q:\n%s", p.where(), m[3], target, containers, p.Text)
	}
	return out, nil
}

// snippetInstaller installs the world with the install-phase commands.
type snippetInstaller struct {
	d    *docWorld
	cmds []*planned
}

var _ world.Installer = (*snippetInstaller)(nil)

func (i *snippetInstaller) Install(ctx context.Context, c *cluster.Cluster) error {
	i.d.sh.kubeconfig = c.AdminKubeconfig()
	for _, p := range i.cmds {
		if _, err := i.d.run(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// writeOverlay writes deploy.md's my-fenceline overlay, from its first
// YAML block that says it is my-fenceline/kustomization.yaml, beside a
// link named fenceline to the checkout, as the overlay expects, and
// returns its directory.
func writeOverlay(t *testing.T, root string) string {
	t.Helper()
	const header = "# my-fenceline/kustomization.yaml\n"
	data, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := Blocks(string(data), "yaml")
	i := slices.IndexFunc(blocks, func(b string) bool { return strings.HasPrefix(b, header) })
	if i < 0 {
		t.Fatalf("docs/deploy.md has no YAML block starting %q", header)
	}
	dir := t.TempDir()
	overlay := filepath.Join(dir, "my-fenceline")
	if err := os.Symlink(root, filepath.Join(dir, "fenceline")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(blocks[i]), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// shell runs commands as an operator's shell would: bash in the
// repository root (the documents' paths are relative to it), with kubectl
// and the built kubectl-fenceline first on PATH, the world's admin
// kubeconfig in KUBECONFIG, and a HOME of its own (kubectl's cache).
type shell struct {
	dir        string
	env        []string
	kubeconfig string
}

func newShell(t *testing.T, root string) (*shell, error) {
	kubectl, err := cluster.Tool("kubectl")
	if err != nil {
		return nil, err
	}
	plugin, err := cluster.Binary("kubectl-fenceline")
	if err != nil {
		return nil, err
	}
	bin := t.TempDir()
	for name, target := range map[string]string{"kubectl": kubectl, "kubectl-fenceline": plugin} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			return nil, err
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" && k != "KUBECONFIG" {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())
	return &shell{dir: root, env: env}, nil
}

// kubectlError matches the lines kubectl prints for an error, which a
// pipeline or a loop may not turn into an exit status.
var kubectlError = regexp.MustCompile(`(?m)^(error: |Error from server)`)

// run runs text with bash -e -o pipefail (so that a failing command inside
// a loop or a pipeline fails it too) and stdin, within timeout, and returns
// its combined output.
func (s *shell) run(ctx context.Context, text, stdin string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", text)
	cmd.Dir = s.dir
	cmd.Env = append(slices.Clone(s.env), "KUBECONFIG="+s.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	// Its own process group, killed whole on the timeout: a pipeline's
	// commands are bash's children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return out, fmt.Errorf("not done after %s", timeout)
	case err != nil:
		return out, err
	case kubectlError.Match(out):
		return out, errors.New("it printed an error")
	}
	return out, nil
}
