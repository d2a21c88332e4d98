// Command capi-mhc runs Cluster API's MachineHealthCheck reconciler, and
// nothing else of Cluster API's core manager, against one API server: the
// end-to-end tests' checker for Fenceline's external remediation.
//
// It is built from the pinned sigs.k8s.io/cluster-api module the way its
// core manager sets the reconciler up (the same cache and client options,
// the ClusterCache that reaches each workload cluster through its
// <cluster>-kubeconfig Secret, the Machine-by-Node index), without the
// other reconcilers, the webhooks, leader election or the CRD migrator.
// The workload cluster's kubeconfig may point back at the same API server.
//
// It installs no CRD: `make capi` copies the ones the reconciler reads
// (Cluster, Machine, MachineHealthCheck) from the pinned module's
// core/config/crd/bases beside the binary, for the tests to install.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util/index"
)

const controllerName = "capi-mhc"

func main() {
	var (
		kubeconfig  string
		namespace   string
		syncPeriod  time.Duration
		concurrency int
	)
	fs := flag.NewFlagSet("capi-mhc", flag.ExitOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster")
	fs.StringVar(&namespace, "namespace", "", "watch only this namespace (all when empty)")
	fs.DurationVar(&syncPeriod, "sync-period", 10*time.Minute, "resync period of the manager's informers")
	fs.IntVar(&concurrency, "concurrency", 10, "concurrent reconciles of the MachineHealthCheck and ClusterCache controllers")
	logConfig := textlogger.NewConfig()
	logConfig.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])

	logger := textlogger.NewLogger(logConfig)
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if err := run(ctrl.SetupSignalHandler(), kubeconfig, namespace, syncPeriod, concurrency); err != nil {
		logger.Error(err, "capi-mhc failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string, syncPeriod time.Duration, concurrency int) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  setup.ManagerCacheOptions(scheme, controllerName, namespace, syncPeriod),
		Client:                 setup.ManagerClientOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The MachineHealthCheck reconciler maps a workload cluster's Node to
	// its Machine through this index.
	if err := index.ByMachineNode(ctx, mgr); err != nil {
		return fmt.Errorf("indexing Machines by Node: %w", err)
	}
	secretClient, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("creating the Secret client: %w", err)
	}
	opts := controller.Options{MaxConcurrentReconciles: concurrency}
	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions(controllerName, 20, 30),
	}, opts)
	if err != nil {
		return fmt.Errorf("creating the ClusterCache: %w", err)
	}
	if err := (&machinehealthcheck.Reconciler{
		Client:       mgr.GetClient(),
		ClusterCache: clusterCache,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return fmt.Errorf("creating the MachineHealthCheck controller: %w", err)
	}
	return mgr.Start(ctx)
}
