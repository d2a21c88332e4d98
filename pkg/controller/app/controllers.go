package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/attacherevidence"
	"fenceline.io/fenceline/pkg/controller/explain"
	"fenceline.io/fenceline/pkg/controller/fencecoverage"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/nodegone"
	"fenceline.io/fenceline/pkg/controller/outofservice"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/controller/remediation"
	"fenceline.io/fenceline/pkg/controller/tainteviction"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

// Controller is one of fenceline-controller's controllers, set up and ready
// to run once the informer caches have synced.
type Controller interface {
	Run(ctx context.Context, workers int)
}

// cacheStarter is a Controller with a cache outside the shared informers,
// which must have synced before the controller runs.
type cacheStarter interface {
	StartCaches(ctx context.Context) error
}

// ControllerContext is what a controller's constructor gets.
type ControllerContext struct {
	// Client is the controller's own client: its requests carry the user
	// agent "fenceline-controller/<name>", so that the API server's audit
	// log attributes every write to the controller that made it.
	Client kubernetes.Interface
	// Actuator writes through Client and records Events under the same
	// user agent.
	Actuator *actuator.Actuator
	// Informers are the shared informers; NodeLeases those of the node
	// Leases in kube-node-lease.
	Informers, NodeLeases informers.SharedInformerFactory
	// Fencing are the shared informers of the fencing API, and
	// FencingClient the controller's own client for it (JSON, same user
	// agent as Client). A controller that uses them must check that the
	// API is served (FencingServed) before it creates an informer.
	Fencing       fencinginformers.SharedInformerFactory
	FencingClient versioned.Interface
	// Dynamic is the controller's client for kinds Fenceline has no types
	// of (Cluster API Machines, csi-addons NetworkFences), same user agent
	// as Client.
	Dynamic dynamic.Interface
	Options Options
	// Settings are the controller's own (Descriptor.Settings), nil when
	// it has none.
	Settings Settings
	// Metrics are the controller's own collectors (Descriptor.Metrics),
	// already registered; nil when it has none.
	Metrics Metrics
	// Evidence is the attacher evidence the controllers share; nil gives
	// a controller that needs it a tracker of its own.
	Evidence *Evidence
}

// defaultGuard is taint-eviction's storm guard with
// kube-controller-manager's defaults.
func defaultGuard() *tainteviction.GuardConfig {
	g := tainteviction.DefaultGuard()
	return &g
}

// Descriptor describes one controller. Adding a controller is adding one
// Descriptor to Controllers: --controllers, its help, its validation and
// the startup all derive from the table.
type Descriptor struct {
	// Name is the controller's name in --controllers, its user agent,
	// its workqueue and its logs.
	Name string
	// EnabledByDefault: "*" in --controllers enables it.
	EnabledByDefault bool
	// FeatureGate, when set, must be enabled for the controller to run.
	FeatureGate featuregate.Feature
	// Settings, when set, returns the controller's own settings with their
	// defaults: its flags join fenceline-controller's, its checks run
	// before the kubeconfig is loaded, and New finds them in
	// ControllerContext.Settings.
	Settings func() Settings
	// Metrics, when set, creates the controller's own collectors: Run
	// registers those of every enabled controller at start-up, so that a
	// replica waiting for the lease serves them too, and New finds them in
	// ControllerContext.Metrics. The collectors every controller shares
	// (force deletions, abandoned writes) come with the Actuator.
	Metrics func() Metrics
	// New sets the controller up.
	New func(ControllerContext) (Controller, error)
	// Explain, when set, gives the controller's verdicts for kubectl
	// fenceline explain, from the plugin's view of the cluster.
	Explain func(explain.Input) []explain.Verdict
}

// Settings are a controller's own settings: its flags and their checks.
type Settings interface {
	// AddFlags defines the settings' flags on fs.
	AddFlags(fs *flag.FlagSet)
	// Validate checks them once parsed.
	Validate() error
}

// Metrics are a controller's own Prometheus collectors.
type Metrics interface {
	// Collectors returns them, for registration.
	Collectors() []prometheus.Collector
}

// defaultSettings returns the settings of every controller of table that
// has some, by name, with their defaults.
func defaultSettings(table []Descriptor) map[string]Settings {
	out := map[string]Settings{}
	for _, d := range table {
		if d.Settings != nil {
			out[d.Name] = d.Settings()
		}
	}
	return out
}

// AddControllerFlags defines the flags of every controller's settings on
// fs.
func (o Options) AddControllerFlags(fs *flag.FlagSet) {
	for _, d := range Controllers {
		if s := o.Settings[d.Name]; s != nil {
			s.AddFlags(fs)
		}
	}
}

// settingsOf returns the controller's own settings as their type, or its
// defaults when Options holds none (a caller that built Options by hand).
func settingsOf[S Settings](c ControllerContext, defaults func() S) S {
	if s, ok := c.Settings.(S); ok {
		return s
	}
	return defaults()
}

// metricsOf returns the controller's own metrics as their type, or nil
// (which records nothing) when the context holds none.
func metricsOf[M Metrics](c ControllerContext) M {
	m, _ := c.Metrics.(M)
	return m
}

// Controllers is every controller of fenceline-controller, in start order.
var Controllers = []Descriptor{
	{Name: podgc.Name, EnabledByDefault: true, Explain: podgc.Explain, New: func(c ControllerContext) (Controller, error) {
		return podgc.New(c.Informers, c.Actuator)
	}},
	{Name: quarantine.Name, EnabledByDefault: true, Settings: func() Settings { return quarantine.DefaultSettings() }, Metrics: func() Metrics { return quarantine.NewMetrics() }, Explain: quarantine.Explain, New: newQuarantine},
	{Name: forceeviction.Name, EnabledByDefault: true, Settings: func() Settings { return forceeviction.DefaultSettings() }, Explain: forceeviction.Explain, New: func(c ControllerContext) (Controller, error) {
		return forceeviction.New(c.Informers, c.NodeLeases, c.Actuator, settingsOf(c, forceeviction.DefaultSettings).ReadyGrace)
	}},
	{Name: nodefencing.Name, EnabledByDefault: true, Metrics: func() Metrics { return nodefencing.NewMetrics() }, Explain: nodefencing.Explain, New: newNodeFencing},
	// Replaces kube-controller-manager's taint-eviction-controller, which
	// must then be disabled there; alpha, behind its gate.
	{Name: tainteviction.Name, EnabledByDefault: true, FeatureGate: TaintEviction, Settings: func() Settings { return defaultGuard() }, Metrics: func() Metrics { return tainteviction.NewMetrics() }, Explain: tainteviction.Explain, New: func(c ControllerContext) (Controller, error) {
		guard := settingsOf(c, defaultGuard)
		return tainteviction.New(tainteviction.Config{Informers: c.Informers, Actuator: c.Actuator, Client: c.Client, Guard: *guard, Resync: c.Options.Resync, Metrics: metricsOf[*tainteviction.Metrics](c)})
	}},
	// Finds the nodes a FencePolicy selects that could not be fenced now.
	{Name: fencecoverage.Name, EnabledByDefault: true, Metrics: func() Metrics { return fencecoverage.NewMetrics() }, New: newFenceCoverage},
	// Detaches, fenced, what stays attached to a deleted Node.
	{Name: nodegone.Name, EnabledByDefault: true, New: newNodeGone},
	// Fenceline as the remediator of NodeHealthCheck and MachineHealthCheck
	// (FencelineRemediation): opt-in, because a remediation it acts on
	// fences a node with no approval but the health checker's.
	{Name: remediation.Name, Settings: func() Settings { return remediation.DefaultSettings() }, New: newRemediation},
	// Removing the out-of-service taint automatically is opt-in.
	{Name: outofservice.Name, Explain: outofservice.Explain, New: func(c ControllerContext) (Controller, error) {
		return outofservice.New(c.Informers, c.Actuator)
	}},
}

// FeatureGates are the gates of fenceline-controller's own features (the
// ones Descriptor.FeatureGate may name), registered on --feature-gates
// next to the logging, metrics and client-go gates.
var FeatureGates = map[featuregate.Feature]featuregate.FeatureSpec{
	TaintEviction:           {Default: false, PreRelease: featuregate.Alpha},
	NodeLifecycleConditions: {Default: false, PreRelease: featuregate.Alpha},
}

// NodeLifecycleConditions makes node-fencing publish the fence state a node
// is in as the Node lifecycle conditions of KEP-5683 (MaintenancePlanned,
// MaintenanceInProgress), for clusters whose NodeLifecycleConditions gate
// is on; the gate has the Kubernetes gate's name.
const NodeLifecycleConditions featuregate.Feature = "NodeLifecycleConditions"

// TaintEviction enables the taint-eviction controller, the storage-aware
// replacement of kube-controller-manager's taint-eviction-controller
// (disable that one with --controllers=*,-taint-eviction-controller).
const TaintEviction featuregate.Feature = "TaintEviction"

// KnownControllers returns the name of every controller, in table order.
func KnownControllers() []string {
	return controllerNames(Controllers, func(Descriptor) bool { return true })
}

// DisabledByDefault returns the controllers that "*" does not enable.
func DisabledByDefault() []string {
	return controllerNames(Controllers, func(d Descriptor) bool { return !d.EnabledByDefault })
}

// ControllersHelp is the help text of --controllers.
func ControllersHelp() string {
	return fmt.Sprintf("Controllers to run: '*' enables all that are on by default, 'name' enables one, '-name' disables one. Known: %s. Off by default: %s.",
		strings.Join(KnownControllers(), ", "), strings.Join(DisabledByDefault(), ", "))
}

func controllerNames(table []Descriptor, keep func(Descriptor) bool) []string {
	var out []string
	for _, d := range table {
		if keep(d) {
			out = append(out, d.Name)
		}
	}
	return out
}

// EnabledControllers resolves a --controllers list the way
// kube-controller-manager does: "*" enables every controller that is on by
// default, "name" enables one, "-name" disables one. The last mention of a
// name wins over "*". A controller whose feature gate is off (a nil gate
// counts as off) is not enabled by "*", and naming it is an error.
func EnabledControllers(spec []string, gate featuregate.FeatureGate) (map[string]bool, error) {
	return enabledControllers(Controllers, spec, gate)
}

func enabledControllers(table []Descriptor, spec []string, gate featuregate.FeatureGate) (map[string]bool, error) {
	known := controllerNames(table, func(Descriptor) bool { return true })
	star := false
	explicit := map[string]bool{}
	for _, raw := range spec {
		item := strings.TrimSpace(raw)
		switch {
		case item == "":
			continue
		case item == "*":
			star = true
			continue
		}
		name, off := strings.CutPrefix(item, "-")
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("unknown controller %q in --controllers (known: %s)", name, strings.Join(known, ", "))
		}
		explicit[name] = !off
	}
	enabled := map[string]bool{}
	var errs []error
	for _, d := range table {
		on, named := explicit[d.Name]
		if !named {
			on = star && d.EnabledByDefault
		}
		if on && d.FeatureGate != "" && (gate == nil || !gate.Enabled(d.FeatureGate)) {
			if named {
				errs = append(errs, fmt.Errorf("controller %q in --controllers needs --feature-gates=%s=true", d.Name, d.FeatureGate))
			}
			on = false
		}
		if on {
			enabled[d.Name] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return enabled, nil
}

// quarantineController is quarantine with the attacher evidence it acts
// on: the heartbeat Leases of fenceline-attachers, without which it
// neither force-deletes nor releases anything.
type quarantineController struct {
	*quarantine.Controller
	*Evidence
}

func newQuarantine(c ControllerContext) (Controller, error) {
	evidence, tracker, err := evidenceOf(c)
	if err != nil {
		return nil, err
	}
	s := settingsOf(c, quarantine.DefaultSettings)
	q, err := quarantine.New(c.Informers, c.Actuator, s.Delay, s.LiftDelay, tracker, metricsOf[*quarantine.Metrics](c))
	if err != nil {
		return nil, err
	}
	return quarantineController{Controller: q, Evidence: evidence}, nil
}

// Evidence is the process's one attacher-evidence tracker, shared by the
// controllers that act on it: one watch of the heartbeat Leases and one
// verdict per driver, however many controllers read them. It is created
// by the first controller that asks, and started once.
type Evidence struct {
	newTracker func() (*attacherevidence.Tracker, error)

	created, started sync.Once
	tracker          *attacherevidence.Tracker
	err, startErr    error
}

// NewEvidence returns an Evidence whose tracker reads through client and
// the CSIDriver informer of f.
func NewEvidence(client kubernetes.Interface, f informers.SharedInformerFactory, resync time.Duration) *Evidence {
	return &Evidence{newTracker: func() (*attacherevidence.Tracker, error) {
		return attacherevidence.New(client, f.Storage().V1().CSIDrivers(), resync)
	}}
}

func (e *Evidence) get() (*attacherevidence.Tracker, error) {
	e.created.Do(func() { e.tracker, e.err = e.newTracker() })
	return e.tracker, e.err
}

// StartCaches starts the heartbeat Lease cache, once for every controller
// that shares it, and waits for it to sync: a controller must not report
// "no heartbeat" for one that is merely not cached yet. A sync cut short
// by ctx is no error.
func (e *Evidence) StartCaches(ctx context.Context) error {
	e.started.Do(func() {
		e.tracker.Start(ctx)
		if !e.tracker.WaitForCacheSync(ctx) && ctx.Err() == nil {
			e.startErr = errors.New("heartbeat Lease cache did not sync")
		}
	})
	return e.startErr
}

// evidenceOf returns the context's shared Evidence and its tracker, or a
// tracker of the controller's own for a context built without one.
func evidenceOf(c ControllerContext) (*Evidence, *attacherevidence.Tracker, error) {
	e := c.Evidence
	if e == nil {
		e = NewEvidence(c.Client, c.Informers, c.Options.Resync)
	}
	t, err := e.get()
	return e, t, err
}

// nodeGoneController is node-gone with the attacher evidence it acts on:
// it starts a detach only where a fence-capable fenceline-attacher serves
// the driver.
type nodeGoneController struct {
	*nodegone.Controller
	*Evidence
}

func newNodeGone(c ControllerContext) (Controller, error) {
	evidence, tracker, err := evidenceOf(c)
	if err != nil {
		return nil, err
	}
	g, err := nodegone.New(c.Informers, c.Actuator, tracker)
	if err != nil {
		return nil, err
	}
	return nodeGoneController{Controller: g, Evidence: evidence}, nil
}

// newNodeFencing sets up node-fencing when the fencing API is served. A
// cluster without Fenceline's CRDs (an upgrade that did not apply
// deploy/crds) runs every other controller: the error says what to do,
// and waiting for informers of an API that is not there would stall all.
func newNodeFencing(c ControllerContext) (Controller, error) {
	if err := FencingServed(c.FencingClient); err != nil {
		return nil, fmt.Errorf("%w: %v; install deploy/crds or disable it with --controllers=*,-%s", errNotServed, err, nodefencing.Name)
	}
	return nodefencing.New(nodefencing.Config{
		Informers: c.Informers, NodeLeases: c.NodeLeases, Fencing: c.Fencing,
		Client: c.FencingClient, Actuator: c.Actuator, Recorder: c.Actuator.Recorder, Metrics: metricsOf[*nodefencing.Metrics](c),
		LifecycleConditions: c.Options.FeatureGate != nil && c.Options.FeatureGate.Enabled(NodeLifecycleConditions),
		Dynamic:             c.Dynamic, Discovery: c.FencingClient.Discovery(),
	})
}

// newRemediation sets up remediation when the fencing API is served, as
// node-fencing does.
func newRemediation(c ControllerContext) (Controller, error) {
	if err := FencingServed(c.FencingClient); err != nil {
		return nil, fmt.Errorf("%w: %v; install deploy/crds or disable it with --controllers=*,-%s", errNotServed, err, remediation.Name)
	}
	var machines remediation.MachineNodes
	if c.Dynamic != nil {
		machines = remediation.DynamicMachineNodes(c.Dynamic)
	}
	return remediation.New(remediation.Config{
		Informers: c.Informers, Fencing: c.Fencing, Client: c.FencingClient, Kube: c.Client,
		Machines: machines, Recorder: c.Actuator.Recorder, DryRun: c.Options.DryRun,
		Namespaces: settingsOf(c, remediation.DefaultSettings).Namespaces,
	})
}

// newFenceCoverage sets up fence-coverage when the fencing API is served,
// as node-fencing does.
func newFenceCoverage(c ControllerContext) (Controller, error) {
	if err := FencingServed(c.FencingClient); err != nil {
		return nil, fmt.Errorf("%w: %v; install deploy/crds or disable it with --controllers=*,-%s", errNotServed, err, fencecoverage.Name)
	}
	return fencecoverage.New(fencecoverage.Config{
		Informers: c.Informers, Fencing: c.Fencing, Client: c.FencingClient,
		Recorder: c.Actuator.Recorder, Metrics: metricsOf[*fencecoverage.Metrics](c),
	})
}

// errNotServed marks a controller that cannot run because an API it needs
// is not served; the others run.
var errNotServed = errors.New("the API it needs is not served")

// FencingServed reports an error when the API server does not serve the
// fencing API (fenceline.io/v1alpha1 FencingRequests).
func FencingServed(client versioned.Interface) error {
	res, err := client.Discovery().ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		return fmt.Errorf("discovering %s: %w", fencingv1alpha1.SchemeGroupVersion, err)
	}
	for _, r := range res.APIResources {
		if r.Name == "fencingrequests" {
			return nil
		}
	}
	return fmt.Errorf("%s does not serve fencingrequests", fencingv1alpha1.SchemeGroupVersion)
}
