package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fenceline.io/fenceline/test/rbaccheck"
)

// portAttempts is how often a component is restarted on a new port when
// the chosen free port was taken in between.
const portAttempts = 3

// startOnFreePorts runs start with fresh ports until the component becomes
// ready or portAttempts is exhausted. Each failed attempt's process is
// stopped before the next.
func startOnFreePorts(ctx context.Context, nports int, start func(ports []int) error) error {
	var lastErr error
	for range portAttempts {
		ports, err := FreePorts(nports)
		if err != nil {
			return err
		}
		err = start(ports)
		if err == nil {
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return lastErr
}

func (c *Cluster) startEtcd(ctx context.Context, bin string) (string, error) {
	var url string
	attempt := 0
	err := startOnFreePorts(ctx, 2, func(ports []int) error {
		attempt++
		url = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		p, err := StartProcess("etcd", c.logDir, bin,
			"--name=fenceline",
			"--data-dir="+filepath.Join(c.dir, fmt.Sprintf("etcd-%d", attempt)),
			"--listen-client-urls="+url,
			"--advertise-client-urls="+url,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=fenceline="+peer,
			"--unsafe-no-fsync",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
		c.Track(p)
		err = waitReady(ctx, p, 100*time.Millisecond, httpOK(http.DefaultClient, url+"/health"))
		if err != nil {
			p.Stop(time.Second)
			return err
		}
		return nil
	})
	return url, err
}

func (c *Cluster) startAPIServer(ctx context.Context, bin, etcdURL string) error {
	tokens := filepath.Join(c.dir, "tokens.csv")
	// token,user,uid,"groups"
	line := fmt.Sprintf("%s,fenceline-admin,fenceline-admin,\"system:masters\"\n", c.adminToken)
	if err := os.WriteFile(tokens, []byte(line), 0o600); err != nil {
		return fmt.Errorf("writing token file: %w", err)
	}
	var auditArgs []string
	if c.auditLog != "" {
		policy := filepath.Join(c.dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(rbaccheck.AuditPolicy), 0o600); err != nil {
			return fmt.Errorf("writing audit policy: %w", err)
		}
		// Blocking mode writes each event before the response is sent, so
		// a test reads every call its components made once they return.
		auditArgs = []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.auditLog,
			"--audit-log-format=json", "--audit-log-mode=blocking"}
	}
	return startOnFreePorts(ctx, 1, func(ports []int) error {
		c.serverURL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		p, err := StartProcess("kube-apiserver", c.logDir, bin, append([]string{
			"--etcd-servers=" + etcdURL,
			"--etcd-prefix=/fenceline",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
			"--tls-cert-file=" + c.pki.ServeCert,
			"--tls-private-key-file=" + c.pki.ServeKey,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + c.pki.SAPub,
			"--service-account-signing-key-file=" + c.pki.SAKey,
			"--token-auth-file=" + tokens,
			// Client certificates of the CA authenticate real kubelets as
			// their nodes (NodeKubeconfig); the Node authorizer and the
			// NodeRestriction admission plugin hold them to what a node
			// may do, as in a real cluster.
			"--client-ca-file=" + c.pki.CACert,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--service-cluster-ip-range=10.96.0.0/16",
			"--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		}, auditArgs...)...)
		if err != nil {
			return err
		}
		c.Track(p)
		if err := c.initClients(); err != nil {
			p.Stop(time.Second)
			return err
		}
		err = waitReady(ctx, p, 200*time.Millisecond, func(ctx context.Context) error {
			body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("readyz: %w (%s)", err, body)
			}
			return nil
		})
		if err != nil {
			p.Stop(time.Second)
			return err
		}
		return nil
	})
}

func (c *Cluster) initClients() error {
	c.adminConfig = &rest.Config{
		Host:            c.serverURL,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.CACertData},
		QPS:             100,
		Burst:           200,
	}
	cs, err := kubernetes.NewForConfig(c.adminConfig)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	c.client = cs
	c.adminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	return writeKubeconfig(c.adminKubeconfig, c.serverURL, c.pki.CACert, "fenceline-admin", c.adminToken)
}

func (c *Cluster) startControllerManager(ctx context.Context, bin string, extra []string) error {
	args := []string{
		"--controllers=*",
		"--service-account-private-key-file=" + c.pki.SAKey,
		"--root-ca-file=" + c.pki.CACert,
		"--node-monitor-period=1s",
		"--node-monitor-grace-period=" + NodeMonitorGracePeriod.String(),
		"--node-startup-grace-period=10s",
		"--allocate-node-cidrs=false",
	}
	return c.startSecureComponent(ctx, "kube-controller-manager", bin, "kcm-certs", append(args, extra...))
}

func (c *Cluster) startScheduler(ctx context.Context, bin string) error {
	return c.startSecureComponent(ctx, "kube-scheduler", bin, "scheduler-certs", nil)
}

// startSecureComponent starts a control-plane component that authenticates
// with the admin kubeconfig and serves /healthz on a loopback secure port,
// and waits until it is healthy.
func (c *Cluster) startSecureComponent(ctx context.Context, name, bin, certDir string, extra []string) error {
	return startOnFreePorts(ctx, 1, func(ports []int) error {
		args := []string{
			"--kubeconfig=" + c.adminKubeconfig,
			"--authentication-kubeconfig=" + c.adminKubeconfig,
			"--authorization-kubeconfig=" + c.adminKubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--cert-dir=" + filepath.Join(c.dir, certDir),
			"--leader-elect=false",
			"--profiling=false",
		}
		p, err := StartProcess(name, c.logDir, bin, append(args, extra...)...)
		if err != nil {
			return err
		}
		c.Track(p)
		if err := waitReady(ctx, p, 200*time.Millisecond, httpOK(insecureLoopbackClient, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz")); err != nil {
			p.Stop(time.Second)
			return err
		}
		return nil
	})
}

// startKWOK starts KWOK with the node Lease duration, parallelism and
// node status interval of opts.
func (c *Cluster) startKWOK(ctx context.Context, bin string, opts Options) error {
	leaseSeconds := opts.NodeLeaseSeconds
	if leaseSeconds <= 0 {
		leaseSeconds = NodeLeaseDurationSeconds
	}
	cfg := filepath.Join(c.dir, "kwok.yaml")
	if err := os.WriteFile(cfg, []byte(kwokConfigFor(opts.KWOKParallelism, opts.NodeStatusInterval)), 0o600); err != nil {
		return fmt.Errorf("writing kwok config: %w", err)
	}
	return startOnFreePorts(ctx, 1, func(ports []int) error {
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		p, err := StartProcess("kwok", c.logDir, bin,
			"--kubeconfig="+c.adminKubeconfig,
			"--config="+cfg,
			"--manage-nodes-with-label-selector="+PoweredLabel+"="+PoweredOn,
			"--node-lease-duration-seconds="+strconv.Itoa(leaseSeconds),
			"--server-address="+addr,
			"--node-ip=127.0.0.1",
		)
		if err != nil {
			return err
		}
		c.Track(p)
		if err := waitReady(ctx, p, 200*time.Millisecond, httpOK(http.DefaultClient, "http://"+addr+"/healthz")); err != nil {
			p.Stop(time.Second)
			return err
		}
		return nil
	})
}

// insecureLoopbackClient checks the health of components that serve a
// self-signed certificate on 127.0.0.1; it sends no credentials.
var insecureLoopbackClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe only
}

func httpOK(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
