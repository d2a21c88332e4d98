package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/deploy"
	"fenceline.io/fenceline/test/world"
)

const (
	// chartDir is the chart, relative to the repository root.
	chartDir = "deploy/helm/fenceline"
	// namespace is the release namespace: the one the kustomize bases and
	// the test world's components use.
	namespace = world.Namespace
)

// ReleaseName is the release Installer installs, the name docs/helm.md uses.
const ReleaseName = "fenceline"

// installTimeout bounds `helm install --wait`: the CRDs, every object, and
// the Deployments' pods ready on the KWOK nodes.
const installTimeout = 2 * time.Minute

// Installer installs the chart from the working tree as docs/helm.md says
// a user does: the namespace from deploy/namespace (Pod Security
// restricted), then `helm install fenceline deploy/helm/fenceline
// --namespace fenceline-system --wait` with Values, through the Helm
// library and a cluster-admin kubeconfig. It is a world.Installer.
type Installer struct {
	// Values are the release's values (helm install -f), nil for the
	// chart's defaults.
	Values map[string]any
}

var _ world.Installer = (*Installer)(nil)

// Install installs the release and waits until it is deployed with every
// Deployment ready. Helm's own log goes to helm.log among the cluster's
// logs.
func (i *Installer) Install(ctx context.Context, c *cluster.Cluster) error {
	if err := createReleaseNamespace(ctx, c); err != nil {
		return err
	}
	cfg, closeLog, err := actionConfig(c)
	if err != nil {
		return err
	}
	defer closeLog()
	ch, err := load()
	if err != nil {
		return err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = ReleaseName, namespace
	inst.Wait, inst.Timeout = true, installTimeout
	rel, err := inst.RunWithContext(ctx, ch, i.Values)
	if err != nil {
		return fmt.Errorf("helm install %s %s: %w (see helm.log)%s", ReleaseName, chartDir, err, describeWorkloads(ctx, c))
	}
	if rel.Info == nil || rel.Info.Status != release.StatusDeployed {
		return fmt.Errorf("helm install %s: release not deployed: %+v", ReleaseName, rel.Info)
	}
	return nil
}

// load loads the chart from the working tree.
func load() (*chart.Chart, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	c, err := loader.Load(filepath.Join(root, chartDir))
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", chartDir, err)
	}
	return c, nil
}

// Uninstall runs `helm uninstall fenceline --wait`.
func Uninstall(c *cluster.Cluster) error {
	cfg, closeLog, err := actionConfig(c)
	if err != nil {
		return err
	}
	defer closeLog()
	u := action.NewUninstall(cfg)
	u.Wait, u.Timeout = true, installTimeout
	if _, err := u.Run(ReleaseName); err != nil {
		return fmt.Errorf("helm uninstall %s: %w (see helm.log)", ReleaseName, err)
	}
	return nil
}

// actionConfig is Helm's action configuration for the release namespace
// with the Secret storage driver (helm's default), logging to helm.log.
func actionConfig(c *cluster.Cluster) (*action.Configuration, func(), error) {
	logFile, err := os.OpenFile(filepath.Join(c.LogDir(), "helm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("creating helm.log: %w", err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := c.AdminKubeconfig(), namespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) { fmt.Fprintf(logFile, format+"\n", v...) }
	if err := cfg.Init(flags, ns, "secret", logf); err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, func() { logFile.Close() }, nil
}

// createReleaseNamespace creates the release namespace from
// deploy/namespace/namespace.yaml, labels included, as docs/helm.md's
// first step does; an existing namespace is left alone.
func createReleaseNamespace(ctx context.Context, c *cluster.Cluster) error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "namespace", "namespace.yaml"))
	if err != nil {
		return fmt.Errorf("reading the namespace manifest: %w", err)
	}
	objs, err := deploy.DecodeObjects(data)
	if err != nil || len(objs) != 1 || objs[0].GetName() != namespace {
		return fmt.Errorf("deploy/namespace/namespace.yaml: want the namespace %s (%v)", namespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: objs[0].GetLabels()}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	return nil
}

// describeWorkloads says why the release namespace's pods are not ready,
// for an install that timed out: ReplicaSets that cannot create pods (a
// Pod Security or quota refusal) and pods not Ready with their phase and
// conditions.
func describeWorkloads(ctx context.Context, c *cluster.Cluster) string {
	// The install's context may be what ran out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var b strings.Builder
	rss, err := c.Client().AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("; listing ReplicaSets: %v", err)
	}
	for _, rs := range rss.Items {
		for _, cond := range rs.Status.Conditions {
			fmt.Fprintf(&b, "\n  replicaset %s: %s=%s %s: %s", rs.Name, cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	pods, err := c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("; listing pods: %v", err)
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  pod %s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, ", %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	if b.Len() == 0 {
		return "; no ReplicaSet or pod in " + namespace
	}
	return ":" + b.String()
}
