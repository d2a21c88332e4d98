package docsnippets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// Why a command is not run. Each names what the test cannot give the
// command, or where the same thing is tested instead.
const (
	needsDocker  = "needs a container engine (Docker) and a registry to push to"
	buildsTools  = "builds the control plane from the Go module proxy first: over 20 minutes on two cores"
	testTarget   = "is itself a whole test target (a suite, benchmarks or chaos episodes) that make runs on its own"
	buildsBin    = "rebuilds bin/, which this test and the tests beside it run (make test builds it before any test)"
	changesHost  = "changes the host: installs a binary into a system directory"
	editsTree    = "rewrites files of this checkout: deploy/kustomization.yaml (test/deploy renders the same image override), the generated code (test/codegen checks it is current) or the plugin's golden files"
	podLogs      = "reads a container's logs: the world's pods are KWOK's, with no containers (the processes they stand for log to files); the pod or Deployment it reads and the container it names are checked to exist instead"
	registry     = "needs a registry: registry.example.com stands for the user's"
	helmCLI      = "needs the helm command, which no make target builds; test/helm and its end-to-end story (test/helm/e2e) install the chart through Helm's library"
	userInput    = "is a placeholder only the user can fill in: their repository URL, or their driver's sockets and I/O tool"
	userModule   = "edits the go.mod of the user's own module, which imports Fenceline's"
	csiSanity    = "is a step of the csi-sanity run against the mock driver, which needs csi-sanity installed from the network; make test runs the same suite from Go (mock-driver/driver)"
	fenceSanity  = "is a step of the fence-sanity run against the mock driver; make test runs fence-sanity against it (mock-driver/fencesanity)"
	mockServer   = "starts the mock driver in the foreground until interrupted; every world runs the same binary, a node socket per node"
	releaseBuild = "builds or reads a release for every architecture (minutes); hack/release's tests build one and check its SHA256SUMS"
	otherLease   = "reads the Lease of the migration's example driver in kube-system, where no attacher leads here; runbooks.md's read of the same Lease in the driver's namespace runs"
)

// phase orders the commands that run: most in document order, a few
// where the others need them.
type phase int

const (
	// inDocOrder commands run in the order of the documents.
	inDocOrder phase = iota
	// install commands are the world's installation (world.Installer),
	// before any Fenceline component starts.
	install
	// setup commands run before the documents' order: later commands read
	// what they make.
	setup
	// last commands run after every other: they take the install down.
	last
)

// An entry classifies the commands cmds of file: skip says why they are
// not run; otherwise they run in phase, why saying why there (or why with
// stdin), each within timeout (defaultTimeout when zero). A skipped
// `kubectl logs` command with checkLogs is checked in document order
// instead: its pod or Deployment exists and has the container it names.
type entry struct {
	file      string
	skip      string
	checkLogs bool
	phase     phase
	why       string
	stdin     string
	timeout   time.Duration
	cmds      []string
}

func skip(file, reason string, cmds ...string) entry {
	return entry{file: file, skip: reason, cmds: cmds}
}

// logs is skip for `kubectl logs` commands, whose targets are checked.
func logs(file string, cmds ...string) entry {
	return entry{file: file, skip: podLogs, checkLogs: true, cmds: cmds}
}

// runs says whether the entry's commands run, or are checked, against the
// world.
func (e *entry) runs() bool { return e.skip == "" || e.checkLogs }

func run(file string, cmds ...string) entry { return entry{file: file, cmds: cmds} }

// defaultTimeout bounds a command the table gives no timeout: most take
// well under a second, a rollout status a few.
const defaultTimeout = time.Minute

// table classifies every command of README.md and docs/*.md, by its exact
// text (as Extract gives it: continuation lines joined, comments and
// prompts removed). A command missing from it, or an entry no document
// holds any more, fails TestSnippetsClassified.
var table = []entry{
	skip("README.md", buildsTools, "make demo"),
	skip("README.md", testTarget, "make test"),
	skip("README.md", buildsBin, "make build"),
	skip("README.md", csiSanity,
		"go install github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.6.0",
		"DIR=$(mktemp -d)",
		"bin/mock-driver --endpoint=unix://$DIR/csi.sock --node-id=sanity-node --state-dir=$DIR/state &",
		"csi-sanity --csi.endpoint=$DIR/csi.sock --csi.mountdir=$DIR/mount --csi.stagingdir=$DIR/staging --csi.testvolumesize=1073741824"),
	skip("README.md", needsDocker, "make image IMAGE_REGISTRY=registry.example.com VERSION=v0.1.0 IMAGE_PUSH=true"),
	skip("README.md", editsTree, "cd deploy && kustomize edit set image fenceline-controller=registry.example.com/fenceline-controller:v0.1.0 fenceline-fence-agent=registry.example.com/fenceline-fence-agent:v0.1.0 && cd .."),
	{file: "README.md", phase: install, timeout: time.Minute,
		why:  "the README's install is the world's: the components run as the Deployments it applies say",
		cmds: []string{"kubectl apply -k deploy/"}},

	run("docs/attacher.md",
		"kubectl -n <namespace> describe pvc <claim>",
		"kubectl -n <namespace> get events --field-selector involvedObject.kind=PersistentVolumeClaim,involvedObject.name=<claim>"),

	skip("docs/benchmarks.md", testTarget,
		"make bench",
		"FENCELINE_BENCH_REPS=1 FENCELINE_BENCH_PODS=100 go test -run '^$' -bench 'Failover$' -benchtime 1x -timeout 60m ./test/bench/",
		"go test -run '^$' -bench 'FailoverNoHuman$' -benchtime 1x -timeout 40m ./test/bench/ -args -nohuman-reps=5",
		"FENCELINE_BENCH_UPSTREAM_WATCH=12m go test -run '^$' -bench FailoverNoHumanUpstream -benchtime 1x -timeout 40m ./test/bench/",
		"go test -run '^$' -bench AttachThroughput -benchtime 1x ./test/bench/ -args -vas=1000 -kube-api-qps=5 -kube-api-burst=10",
		"make bench-scale",
		"make bench-scale SCALE_SIZES=500x1000",
		"make bench-scale-attacher",
		"make bench-scale-attacher SCALE_VAS=5000",
		"FENCELINE_BENCH_REPS=3 FENCELINE_BENCH_FAILOVER_QPS=50 go test -run '^$' -bench 'Failover$' -benchtime 1x -timeout 30m ./test/bench/",
		"FENCELINE_BENCH_REPS=1 FENCELINE_BENCH_PODS=100 FENCELINE_BENCH_FAILOVER_QPS=50 go test -run '^$' -bench 'Failover$' -benchtime 1x -timeout 30m ./test/bench/",
		"FENCELINE_BENCH_CONFIGS=F FENCELINE_BENCH_REPS=1 FENCELINE_BENCH_PODS=100 FENCELINE_BENCH_FAILOVER_QPS=50 FENCELINE_BENCH_KCM_QPS=200 go test -run '^$' -bench 'Failover$' -benchtime 1x -timeout 30m ./test/bench/"),

	skip("docs/chaos.md", testTarget,
		"make chaos",
		"make chaos SEED=93",
		"make chaos CHAOS_EPISODES=50 CHAOS_FIRST_SEED=1000 CHAOS_PARALLEL=4"),

	skip("docs/deploy.md", needsDocker,
		"make image IMAGE_REGISTRY=registry.example.com VERSION=v0.1.0",
		"docker push registry.example.com/fenceline-attacher:v0.1.0",
		"make image IMAGE_REGISTRY=registry.example.com VERSION=v0.1.0 PLATFORMS=linux/amd64,linux/arm64 IMAGE_PUSH=true",
		"docker build --target controller --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t registry.example.com/fenceline-controller:v0.1.0 ."),
	run("docs/deploy.md",
		// Applied over the README's install: the overlay only renames the
		// images, which KWOK's pods do not run.
		"kubectl apply -k my-fenceline/",
		"kubectl -n fenceline-system rollout status deployment/fenceline-controller",
		"kubectl -n fenceline-system get leases",
		"kubectl annotate csidriver <driver name> fenceline.io/safe-detach=true",
		// The example's CSIDriver is the world's driver, mock.fenceline.io,
		// with the same spec; its Deployment runs on KWOK beside the world's
		// attachers.
		"kubectl apply -k deploy/examples/mock-driver/"),
	logs("docs/deploy.md", "kubectl -n fenceline-system logs deploy/mock-fenceline-controller -c csi-attacher"),
	// 5 minutes: kubectl waits until the CRDs are gone, and
	// kube-apiserver's CRD finalizer, refused "storage is (re)initializing"
	// while a CRD created moments before still initializes its storage,
	// backs off exponentially; on a loaded machine that has taken more
	// than 2 minutes.
	{file: "docs/deploy.md", phase: last, timeout: 5 * time.Minute,
		why: "they remove what every other command reads",
		cmds: []string{
			"kubectl delete -f deploy/examples/mock-driver/deployment.yaml -f deploy/examples/mock-driver/csidriver.yaml",
			"kubectl delete -k deploy/",
		}},

	run("docs/fence-agent.md",
		"kubectl -n fenceline-system create secret generic bmc-rack1 --from-literal=username=fence --from-literal=password='...'"),

	skip("docs/fence-sanity.md", userInput,
		"fence-sanity --controller-endpoint=unix:///run/csi/controller.sock --node-endpoint=node-1=unix:///run/csi/node-1.sock --io-command='my-io-tool write --volume={volume} --node={node}'"),
	skip("docs/fence-sanity.md", fenceSanity,
		"make build fence-sanity",
		"DIR=$(mktemp -d)",
		"bin/mock-driver --endpoint=unix://$DIR/controller.sock --node-endpoint=node-1=unix://$DIR/node-1.sock --state-dir=$DIR/state &",
		`bin/fence-sanity --controller-endpoint=unix://$DIR/controller.sock --node-endpoint=node-1=unix://$DIR/node-1.sock --io-command="bin/mock-driver write --endpoint=unix://$DIR/{node}.sock --volume={volume}"`),

	skip("docs/fencing-api.md", editsTree, "make generate"),

	run("docs/fencing.md",
		// Pause, then resume: the policy is as it was for what follows.
		`kubectl patch fencepolicy workers --type merge -p '{"spec":{"paused":true}}'`,
		`kubectl patch fencepolicy workers --type merge -p '{"spec":{"paused":false}}'`,
		"kubectl get fencepolicies",
		"kubectl get fencepolicy workers -o jsonpath='{.status.coverage}'"),

	run("docs/helm.md",
		"kubectl apply -k deploy/namespace",
		"kubectl -n fenceline-system rollout status deployment/fenceline-controller",
		"kubectl -n fenceline-system get leases",
		// Adopting the kustomize install into a release only labels and
		// annotates it.
		`for kind in deployment poddisruptionbudget serviceaccount role rolebinding; do
  kubectl -n fenceline-system label "$kind" -l app.kubernetes.io/part-of=fenceline app.kubernetes.io/managed-by=Helm --overwrite
  kubectl -n fenceline-system annotate "$kind" -l app.kubernetes.io/part-of=fenceline meta.helm.sh/release-name=fenceline meta.helm.sh/release-namespace=fenceline-system --overwrite
done`,
		`for kind in clusterrole clusterrolebinding; do
  kubectl label "$kind" -l app.kubernetes.io/part-of=fenceline app.kubernetes.io/managed-by=Helm --overwrite
  kubectl annotate "$kind" -l app.kubernetes.io/part-of=fenceline meta.helm.sh/release-name=fenceline meta.helm.sh/release-namespace=fenceline-system --overwrite
done`),
	skip("docs/helm.md", helmCLI,
		"helm install fenceline deploy/helm/fenceline --namespace fenceline-system --set image.registry=registry.example.com/fenceline --set image.tag=v0.1.0",
		"helm install fenceline deploy/helm/fenceline --namespace fenceline-system"),

	skip("docs/kubectl-plugin.md", buildsBin, "make build"),
	skip("docs/kubectl-plugin.md", changesHost, "install -m 0755 bin/kubectl-fenceline /usr/local/bin/"),
	run("docs/kubectl-plugin.md",
		"kubectl plugin list",
		"kubectl fenceline status",
		"kubectl fenceline explain dead"),
	{file: "docs/kubectl-plugin.md", phase: setup, stdin: "y\n", timeout: 2 * time.Minute,
		why:  "the transcript answers the confirmation y; the runbooks' commands then read the fenced node and its FencingRequest",
		cmds: []string{"kubectl fenceline fence worker-1"}},
	skip("docs/kubectl-plugin.md", editsTree, "go test ./test/kubectlplugin -run TestPluginGolden -update"),

	skip("docs/local-cluster.md", testTarget,
		"make conformance TAINT_EVICTION=fenceline",
		"FENCELINE_TAINT_EVICTION=fenceline go test -count=1 -v -run TestNoExecuteTaintManager ./test/conformance"),

	run("docs/medik8s.md",
		`kubectl get node <node> -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}'`,
		`kubectl get node <node> -o jsonpath='{.metadata.annotations.fenceline\.io/out-of-service-owner}'`,
		`kubectl get volumeattachments -o jsonpath='{range .items[?(@.spec.nodeName=="<node>")]}{.metadata.name} {.metadata.annotations.fenceline\.io/fence}{"\n"}{end}'`),
	skip("docs/medik8s.md", buildsTools, "make build tools"),
	skip("docs/medik8s.md", testTarget, "go test -count=1 -run TestMedik8s ./test/e2e"),

	run("docs/migration.md",
		// On the driver of testdata/csi-hostpath.yaml: upstream's RBAC, and
		// a controller Deployment with upstream's sidecar.
		`kubectl patch clusterrole external-attacher-runner --type=json -p '[
  {"op": "add", "path": "/rules/-", "value": {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}},
  {"op": "add", "path": "/rules/-", "value": {"apiGroups": ["storage.k8s.io"], "resources": ["csidrivers"], "verbs": ["get", "list", "watch"]}},
  {"op": "add", "path": "/rules/-", "value": {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}}
]'`,
		`for check in "list nodes" "watch csidrivers.storage.k8s.io" "create events -n default" "patch volumeattachments.storage.k8s.io --subresource=status"; do
  kubectl auth can-i $check --as=system:serviceaccount:kube-system:csi-attacher
done`,
		`kubectl -n kube-system patch deployment csi-hostpath-controller --type=strategic -p '{
  "spec": {"template": {"spec": {"containers": [{
    "name": "csi-attacher",
    "image": "registry.example.com/fenceline-attacher:v0.1.0",
    "command": ["/fenceline-attacher"]
  }]}}}}'`,
		"kubectl -n kube-system rollout status deployment/csi-hostpath-controller",
		`kubectl get leases -A -l fenceline.io/driver -o custom-columns='DRIVER:.metadata.annotations.fenceline\.io/driver-name,FENCE:.metadata.annotations.fenceline\.io/unpublish-fence,HOLDER:.spec.holderIdentity,RENEWED:.spec.renewTime'`,
		"kubectl annotate csidriver <driver name> fenceline.io/safe-detach-",
		`kubectl get nodes -o custom-columns='NAME:.metadata.name,TAINTS:.spec.taints[*].key' | awk 'NR==1 || /fenceline\.io\/quarantine/'`,
		`kubectl get volumeattachments -o jsonpath='{range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name} {.spec.attacher}{"\n"}{end}'`,
		`kubectl -n kube-system patch deployment csi-hostpath-controller --type=strategic -p '{
  "spec": {"template": {"spec": {"containers": [{
    "name": "csi-attacher",
    "image": "registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
    "command": null
  }]}}}}'`),
	skip("docs/migration.md", otherLease,
		"kubectl -n kube-system get lease external-attacher-leader-<sanitised driver name> -o jsonpath='{.spec.holderIdentity}'"),

	skip("docs/mock-driver.md", buildsBin, "make build"),
	skip("docs/mock-driver.md", mockServer,
		"DIR=$(mktemp -d)",
		"bin/mock-driver --endpoint=unix://$DIR/controller.sock --node-id=node-1 --node-endpoint=node-2=unix://$DIR/node-2.sock --state-dir=$DIR/state --http-endpoint=127.0.0.1:9808"),
	skip("docs/mock-driver.md", csiSanity,
		"go install github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.6.0",
		"bin/mock-driver --endpoint=unix://$DIR/csi.sock --node-id=sanity-node --state-dir=$DIR/state &",
		"csi-sanity --csi.endpoint=$DIR/csi.sock --csi.mountdir=$DIR/mount --csi.stagingdir=$DIR/staging --csi.testvolumesize=1073741824"),

	skip("docs/release.md", releaseBuild,
		"make release VERSION=v0.1.0",
		"cd _output/release/v0.1.0 && sha256sum -c SHA256SUMS"),
	skip("docs/release.md", registry,
		"REL=_output/release/v0.1.0",
		"REG=registry.example.com/fenceline",
		`for image in fenceline-attacher fenceline-controller fenceline-mock-driver; do
  crane push "$REL/images/$image" "$REG/$image:v0.1.0"
done`,
		`helm push "$REL/charts/fenceline-0.1.0.tgz" "oci://$REG/charts"`,
		"helm install fenceline oci://registry.example.com/fenceline/charts/fenceline --version 0.1.0 --namespace fenceline-system --set image.registry=registry.example.com/fenceline"),
	skip("docs/release.md", userInput,
		"git clone --branch pkg/fence/v0.1.0 <repository URL> ../fenceline",
		"git clone --branch v0.1.0 <repository URL> ../fenceline"),
	skip("docs/release.md", userModule,
		"go mod edit -replace=fenceline.io/fenceline/pkg/fence=../fenceline/pkg/fence",
		"go get fenceline.io/fenceline/pkg/fence@v0.1.0",
		"go mod tidy",
		"go mod edit -replace=fenceline.io/fenceline=../fenceline -replace=fenceline.io/fenceline/pkg/fence=../fenceline/pkg/fence",
		"go get fenceline.io/fenceline@v0.1.0"),
	skip("docs/release.md", testTarget,
		"cd hack/release",
		"go test -short ./...",
		"go test ./...",
		"FENCELINE_RELEASE_ARCHES=amd64 go test ./..."),

	run("docs/runbooks.md",
		"kubectl get fencingrequests",
		"kubectl get fencetargets",
		"kubectl get volumeattachments",
		"kubectl -n fenceline-system get lease fenceline-controller fenceline-fence-agent",
		"kubectl get events -A --field-selector reason=FencingFailed",
		"kubectl get volumeattachments -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,DELETING:.metadata.deletionTimestamp,ERROR:.status.detachError.message",
		"kubectl get events -A --field-selector reason=DetachFailed",
		"kubectl get csidriver <driver> -o jsonpath='{.metadata.annotations}'",
		"kubectl get events -A --field-selector reason=FenceUnsupported",
		"kubectl get events -A --field-selector reason=FencelineNotSafeToForceDelete",
		"kubectl -n <driver-namespace> get lease fenceline-attacher-<sanitised driver name> -o yaml",
		"kubectl get pods -A --field-selector spec.nodeName=<node>",
		"kubectl describe node <node>",
		"kubectl get fencetarget <node> -o yaml",
		`kubectl get volumeattachments -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,ATTACHED:.status.attached,DELETING:.metadata.deletionTimestamp | awk 'NR==1 || $2=="<node>"'`,
		"kubectl get events --field-selector involvedObject.name=<node>",
		"kubectl get fencingrequest <name> -o yaml",
		`kubectl get node <node> -o jsonpath='{.status.conditions[?(@.type=="fenceline.io/LyingFence")]}'`,
		"kubectl -n kube-node-lease get lease <node> -o yaml",
		"kubectl get nodes",
		"kubectl describe fencingrequest <name>",
		"kubectl -n kube-node-lease get leases",
		"kubectl get fencetarget <target> -o yaml",
		`kubectl get fencepolicy <policy> -o jsonpath='{range .status.coverage.uncovered[*]}{.node}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}'`,
		"kubectl get events -n default --field-selector involvedObject.kind=FencePolicy,reason=FencelineNodeNotFenceable",
		"kubectl -n fenceline-system get pods -l app.kubernetes.io/name=fenceline-controller",
		"kubectl -n fenceline-system get lease fenceline-controller -o yaml",
		"kubectl -n fenceline-system get pods -l app.kubernetes.io/name=fenceline-fence-agent",
		"kubectl -n fenceline-system get lease fenceline-fence-agent -o yaml",
		"kubectl -n <driver-namespace> get pods",
		"kubectl -n <driver-namespace> get lease external-attacher-leader-<sanitised driver name> -o yaml"),
	logs("docs/runbooks.md",
		"kubectl -n fenceline-system logs deploy/fenceline-controller",
		"kubectl -n <driver-namespace> logs <controller-pod> -c csi-attacher",
		"kubectl -n fenceline-system logs deploy/fenceline-fence-agent"),
}

// A substitution fills a placeholder of the documents with what it stands
// for in the world: a placeholder in angle brackets, a path, or an example
// name a transcript uses (replaced as a whole word).
type substitution struct {
	placeholder string
	means       string
	value       func(ctx context.Context, d *docWorld) (string, error)
}

// fixed is a substitution value known before the world starts.
func fixed(v string) func(context.Context, *docWorld) (string, error) {
	return func(context.Context, *docWorld) (string, error) { return v, nil }
}

// fencedNode is the node the fence transcript fences.
func fencedNode(_ context.Context, d *docWorld) (string, error) { return d.node, nil }

// substitutions is the one table of placeholders. Each must fill at least
// one command that runs.
var substitutions = []substitution{
	{"<node>", "the node the workload ran on, which the fence transcript fences", fencedNode},
	{"worker-1", "the node the fence transcript of kubectl-plugin.md fences: the workload's", fencedNode},
	{"dead", "the fenced node the explain transcript of kubectl-plugin.md explains", fencedNode},
	{"<target>", "a FenceTarget: the world names them after their nodes; the fenced node's", fencedNode},
	{"<name>", "a FencingRequest: the fenced node's", fencingRequestOf},
	{"<policy>", "the FencePolicy: the world's, named workers as in fencing.md", fixed(policyName)},
	{"<driver name>", "the CSI driver: the world's mock driver", fixed(world.DriverName)},
	{"<driver>", "the CSI driver: the world's mock driver", fixed(world.DriverName)},
	{"<sanitised driver name>", "the driver's name as its Leases spell it", fixed(strings.ToLower(names.SanitizeDriverName(world.DriverName)))},
	{"<driver-namespace>", "where the driver's attacher runs: fenceline-system, as in deploy/examples/mock-driver", fixed(world.Namespace)},
	{"<controller-pod>", "the driver's controller pod: deploy/examples/mock-driver's", examplePod},
	{"<namespace>", "the workload's namespace", fixed(workloadNamespace)},
	{"<claim>", "the workload's claim", fixed(workloadClaim)},
	{"my-fenceline/", "deploy.md's overlay, written from its YAML block beside a link named fenceline to this checkout", func(_ context.Context, d *docWorld) (string, error) {
		return d.overlay + "/", nil
	}},
}

// The world's objects the documents name.
const (
	policyName        = "workers"
	workloadNamespace = "db"
	workloadSet       = "web"
	workloadClaim     = world.ClaimTemplate + "-" + workloadSet + "-0"
)

// fencingRequestOf is the newest FencingRequest of the fenced node.
func fencingRequestOf(ctx context.Context, d *docWorld) (string, error) {
	l, err := d.fencing.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing FencingRequests: %w", err)
	}
	name, newest := "", time.Time{}
	for _, r := range l.Items {
		if r.Spec.NodeName == d.node && !r.CreationTimestamp.Time.Before(newest) {
			name, newest = r.Name, r.CreationTimestamp.Time
		}
	}
	if name == "" {
		return "", fmt.Errorf("node %s has no FencingRequest", d.node)
	}
	return name, nil
}

// examplePod is a pod of deploy/examples/mock-driver's Deployment.
func examplePod(ctx context.Context, d *docWorld) (string, error) {
	l, err := d.w.Cluster.Client().CoreV1().Pods(world.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=mock-fenceline-controller"})
	if err != nil {
		return "", fmt.Errorf("listing the mock driver example's pods: %w", err)
	}
	if len(l.Items) == 0 {
		return "", errors.New("the mock driver example has no pod")
	}
	return l.Items[0].Name, nil
}
