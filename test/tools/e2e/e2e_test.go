package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"

	// Logging flags (-v and friends) on the command line, as upstream's
	// e2e.test has them.
	_ "k8s.io/component-base/logs/testinit"

	// The specs: upstream's sig-node e2e package, which holds
	// test/e2e/node/taints.go. Only that package is linked, not the whole
	// of test/e2e; select specs with --ginkgo.focus.
	_ "k8s.io/kubernetes/test/e2e/node"
)

// TestMain parses the flags upstream's e2e.test takes (--kubeconfig,
// --provider and the rest of the framework's cluster flags, plus the
// --ginkgo.* flags) the way test/e2e/e2e_test.go does.
func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.CommandLine.Args())
		os.Exit(1)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestE2E runs the selected specs through Ginkgo, as upstream's
// RunE2ETests does, without its suite set-up for cloud clusters (image
// pre-pulls, system DaemonSet checks): the caller starts the cluster and
// waits for it to be ready.
func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e suite (node)", suiteConfig, reporterConfig)
}
