package kubectlplugin

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencingclient "fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/version"
)

// Options are the plugin's global settings.
type Options struct {
	Flags   *genericclioptions.ConfigFlags
	Streams genericiooptions.IOStreams
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NewClients builds the clients; nil means from Flags.
	NewClients func() (Clients, error)
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) clients() (Clients, error) {
	if o.NewClients != nil {
		return o.NewClients()
	}
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return Clients{}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-fenceline"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	fc, err := fencingclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("building the fencing client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("building the dynamic client: %w", err)
	}
	return Clients{Kube: kube, Fencing: fc, Dynamic: dyn}, nil
}

// snapshot builds the clients and reads the snapshot.
func (o *Options) snapshot(ctx context.Context) (Clients, *Snapshot, error) {
	c, err := o.clients()
	if err != nil {
		return c, nil, err
	}
	snap, err := ReadSnapshot(ctx, c, o.now())
	return c, snap, err
}

// NewCommand returns the kubectl-fenceline command tree.
func NewCommand(o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-fenceline",
		Short: "Inspect and steer Fenceline: fence status, manual fence and unfence, decisions explained",
		Long: "kubectl fenceline shows what Fenceline sees (CSI drivers and their fence capability, nodes quarantined, fenced\n" +
			"or out of service, FencingRequests, pending detaches, recent Events), asks for a manual fence or unfence\n" +
			"through FencingRequests, and explains the decision each controller would take now for a node.",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fenceline"},
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version answers as every other Fenceline binary does (name,
		// version, commit, Go version), which release checks rely on.
		Version: version.String(),
	}
	root.SetOut(o.Streams.Out)
	root.SetVersionTemplate("kubectl-fenceline {{.Version}}\n")
	// Declared here so that cobra does not take -v for it: kubectl users
	// read -v as verbosity.
	root.Flags().Bool("version", false, "Print the plugin's version, commit and Go version and exit (the version command also reports each driver's fenceline-attacher)")
	o.Flags.AddFlags(root.PersistentFlags())
	root.AddCommand(statusCommand(o), fenceCommand(o), unfenceCommand(o), liftFenceCommand(o), explainCommand(o), versionCommand(o))
	return root
}

func statusCommand(o *Options) *cobra.Command {
	out := newOutputFlags()
	var events int
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "CSI drivers and their fence capability, fenced and out-of-service nodes, FencingRequests, pending detaches, recent Events",
		Args:    cobra.NoArgs,
		PreRunE: out.complete,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, snap, err := o.snapshot(cmd.Context())
			if err != nil {
				return err
			}
			st := BuildStatus(snap, events)
			return out.print(o, st, func(p *Printer) error { return p.PrintStatus(st) })
		},
	}
	out.addFlags(cmd)
	cmd.Flags().IntVar(&events, "events", 20, "How many of the most recent Events of Fenceline's components to show")
	return cmd
}

func versionCommand(o *Options) *cobra.Command {
	var client bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The plugin's version, commit and Go version, and the version of fenceline-controller, fenceline-fence-agent and each driver's fenceline-attacher",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(o.Streams.Out, "kubectl-fenceline", version.String())
			if client {
				return nil
			}
			// Of a snapshot, the versions need only the drivers and
			// their heartbeats.
			c, err := o.clients()
			if err != nil {
				return err
			}
			snap := &Snapshot{Now: o.now()}
			if err := snap.readAttachers(cmd.Context(), c.Kube); err != nil {
				return err
			}
			leases, err := readLeaderLeases(cmd.Context(), c.Kube)
			if err != nil {
				return err
			}
			for _, line := range append(leaderVersions(leases, version.Version), attacherVersions(snap, version.Version)...) {
				fmt.Fprintln(o.Streams.Out, line)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "Print the plugin's version only; do not contact the cluster")
	return cmd
}

func explainCommand(o *Options) *cobra.Command {
	out := newOutputFlags()
	cfg := DefaultExplainConfig()
	cmd := &cobra.Command{
		Use:     "explain NODE",
		Short:   "The decision each controller would take now for the node, its pods and its VolumeAttachments",
		Args:    cobra.ExactArgs(1),
		PreRunE: out.complete,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, snap, err := o.snapshot(cmd.Context())
			if err != nil {
				return err
			}
			objs, err := ReadNodeObjects(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			e, err := Explain(snap, objs, args[0], cfg)
			if err != nil {
				return err
			}
			return out.print(o, e, func(p *Printer) error { return p.PrintExplanation(e) })
		},
	}
	out.addFlags(cmd)
	// fenceline-controller's own flags for its controllers' settings, to
	// pass when the controller does not run with the defaults.
	settings := flag.NewFlagSet("explain", flag.ContinueOnError)
	cfg.AddFlags(settings)
	cmd.Flags().AddGoFlagSet(settings)
	return cmd
}

// confirmFlags are the flags of the commands that write.
type confirmFlags struct {
	yes       bool
	requester string
}

func (f *confirmFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "Do not ask for confirmation")
	cmd.Flags().StringVar(&f.requester, "requester", "", "Who asks, recorded as user:<name> (default: your user name as the API server knows it)")
}

// confirm asks on the plugin's streams unless --yes.
func (f *confirmFlags) confirm(o *Options) Confirm {
	return func(prompt string) (bool, error) {
		if f.yes {
			return true, nil
		}
		fmt.Fprintf(o.Streams.ErrOut, "%s [y/N] ", prompt)
		line, err := bufio.NewReader(o.Streams.In).ReadString('\n')
		if err != nil && line == "" {
			return false, fmt.Errorf("no answer on standard input (use --yes to skip the question): %w", err)
		}
		answer := strings.ToLower(strings.TrimSpace(line))
		return answer == "y" || answer == "yes", nil
	}
}

// who returns "user:<name>": --requester, else the user the API server
// authenticates (SelfSubjectReview, as kubectl auth whoami), else "unknown".
func (f *confirmFlags) who(ctx context.Context, c Clients) string {
	if f.requester != "" {
		return "user:" + strings.TrimPrefix(f.requester, "user:")
	}
	if c.Kube != nil {
		r, err := c.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil && r.Status.UserInfo.Username != "" {
			return "user:" + r.Status.UserInfo.Username
		}
	}
	return "user:unknown"
}

// waitFlags are the flags of the commands that ask node-fencing.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

// add adds --wait and --timeout; actor is who carries the ask out.
func (w *waitFlags) add(cmd *cobra.Command, def time.Duration, actor string) {
	cmd.Flags().BoolVar(&w.wait, "wait", true, "Wait until "+actor+" has carried out the ask")
	cmd.Flags().DurationVar(&w.timeout, "timeout", def, "How long to wait; the ask stays after it, and "+actor+" carries it out when its rule allows")
}

// finish prints what was asked, then waits for it unless --wait=false.
func (w *waitFlags) finish(cmd *cobra.Command, o *Options, c Clients, a *Ask) error {
	if _, err := fmt.Fprintln(o.Streams.Out, a.Asked); err != nil {
		return err
	}
	if !w.wait {
		_, err := fmt.Fprintf(o.Streams.Out, "not waiting: follow it with %s\n", a.Watch)
		return err
	}
	fmt.Fprintf(o.Streams.ErrOut, "waiting up to %s for node-fencing to %s (interrupting stops the wait, not the ask)\n", w.timeout, a.Doing)
	if err := Wait(cmd.Context(), c, a, w.timeout, o.now); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.Streams.Out, "done: node-fencing did %s\n", a.Doing)
	return err
}

func fenceCommand(o *Options) *cobra.Command {
	var f confirmFlags
	var w waitFlags
	var policy, action string
	var override bool
	cmd := &cobra.Command{
		Use:   "fence NODE",
		Short: "Ask for a manual fence of the node: a FencingRequest with reason Manual, approved, that node-fencing carries out",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			act := fencingv1alpha1.FenceAction(action)
			if act != fencingv1alpha1.FenceActionOff && act != fencingv1alpha1.FenceActionReboot {
				return fmt.Errorf("--action must be %s or %s, not %q", fencingv1alpha1.FenceActionOff, fencingv1alpha1.FenceActionReboot, action)
			}
			r, err := Fence(cmd.Context(), c, FenceOptions{Node: args[0], Policy: policy, Action: act, OverrideExclusion: override,
				Requester: f.who(cmd.Context(), c), Confirm: f.confirm(o), Now: o.now()})
			if err != nil {
				return err
			}
			return w.finish(cmd, o, c, FenceAsk(r))
		},
	}
	f.add(cmd)
	w.add(cmd, 5*time.Minute, "node-fencing")
	cmd.Flags().StringVar(&policy, "policy", "", "FencePolicy to follow (default: the policy whose nodeSelector selects the node)")
	cmd.Flags().StringVar(&action, "action", string(fencingv1alpha1.FenceActionOff), "Off or Reboot")
	cmd.Flags().BoolVar(&override, "override-exclusion", false, "Fence the node even though it is labelled fenceline.io/exclude-from-fencing")
	return cmd
}

func unfenceCommand(o *Options) *cobra.Command {
	var f confirmFlags
	var w waitFlags
	var verified string
	cmd := &cobra.Command{
		Use:   "unfence NODE",
		Short: "Ask node-fencing to cancel a fence not yet admitted, to unfence a node by hand, or to clear what a failed fence left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := ParseVerified(verified)
			if err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			a, err := Unfence(cmd.Context(), c, UnfenceOptions{Node: args[0], Requester: f.who(cmd.Context(), c), Verified: v, Confirm: f.confirm(o), Now: o.now()})
			if err != nil {
				return err
			}
			return w.finish(cmd, o, c, a)
		},
	}
	f.add(cmd)
	w.add(cmd, 2*time.Minute, "node-fencing")
	cmd.Flags().StringVar(&verified, "verified", "", "What you verified of the machine since its fence began, off or rebooted: stands in for a new boot ID where node-fencing has none to compare")
	return cmd
}

func liftFenceCommand(o *Options) *cobra.Command {
	var f confirmFlags
	var w waitFlags
	var driver, reason string
	var gone bool
	cmd := &cobra.Command{
		Use:   "lift-fence NODE",
		Short: "Ask the drivers' attachers to lift the storage fences of a node (by node name or node ID), which they do only on evidence that the node uses none of the fenced volumes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			asked, err := LiftFence(cmd.Context(), c, LiftFenceOptions{Node: args[0], Driver: driver, Requester: f.who(cmd.Context(), c),
				Reason: reason, ConfirmGone: gone, Confirm: f.confirm(o)})
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Streams.Out, "asked for a lift on storagefence/%s; each driver's fenceline-attacher carries it out\n", strings.Join(asked, ", storagefence/"))
			if !w.wait {
				_, err := fmt.Fprintln(o.Streams.Out, "not waiting: follow it with kubectl get storagefences")
				return err
			}
			fmt.Fprintf(o.Streams.ErrOut, "waiting up to %s for the lift (interrupting stops the wait, not the request)\n", w.timeout)
			if err := WaitLifted(cmd.Context(), c, asked, w.timeout); err != nil {
				return err
			}
			_, err = fmt.Fprintln(o.Streams.Out, "done: the storage fences are lifted")
			return err
		},
	}
	f.add(cmd)
	w.add(cmd, time.Minute, "each driver's fenceline-attacher")
	cmd.Flags().StringVar(&driver, "driver", "", "Lift only this CSI driver's fences (default: every driver's)")
	cmd.Flags().StringVar(&reason, "reason", "", "Why, recorded on the request and sent to the driver")
	cmd.Flags().BoolVar(&gone, "confirm-gone", false, "State that the machine is powered off or destroyed: needed for a node no Node object names any more")
	return cmd
}
