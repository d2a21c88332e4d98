package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func writeKubeconfig(path, server, caFile, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fenceline"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["fenceline"] = &clientcmdapi.Context{Cluster: "fenceline", AuthInfo: user}
	cfg.CurrentContext = "fenceline"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// NodeKubeconfig writes a kubeconfig that authenticates as node's kubelet
// (user system:node:<node> in group system:nodes, by a client certificate
// of the cluster's CA) and returns its path: the identity the Node
// authorizer and NodeRestriction judge, as they judge a real cluster's
// kubelets.
func (c *Cluster) NodeKubeconfig(node string) (string, error) {
	dir := filepath.Join(c.dir, "nodes", node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	certPath, keyPath := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	user := "system:node:" + node
	if err := c.pki.clientCert(user, []string{"system:nodes"}, certPath, keyPath); err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fenceline"] = &clientcmdapi.Cluster{Server: c.serverURL, CertificateAuthority: c.pki.CACert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certPath, ClientKey: keyPath}
	cfg.Contexts["fenceline"] = &clientcmdapi.Context{Cluster: "fenceline", AuthInfo: user}
	cfg.CurrentContext = "fenceline"
	path := filepath.Join(dir, "kubelet.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// ServiceAccountTokenTTL is the lifetime of tokens issued by
// ServiceAccountConfig: longer than any test or demo session.
const ServiceAccountTokenTTL = 12 * time.Hour

// ServiceAccountConfig returns a client configuration and a kubeconfig path
// that authenticate as the ServiceAccount namespace/name, creating the
// namespace and the account if missing. The token comes from the
// TokenRequest API, so the identity has exactly the RBAC bound to it.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) (*rest.Config, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, path, err := c.ServiceAccountKubeconfig(ctx, namespace, name)
	if err != nil {
		t.Fatalf("service account %s/%s: %v", namespace, name, err)
	}
	return cfg, path
}

// ServiceAccountKubeconfig is ServiceAccountConfig for callers without a
// testing.TB (the demo).
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (*rest.Config, string, error) {
	cs := c.client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, "", fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	ttl := int64(ServiceAccountTokenTTL / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("requesting token for %s/%s: %w", namespace, name, err)
	}
	cfg := &rest.Config{
		Host:            c.serverURL,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.CACertData},
	}
	path := filepath.Join(c.dir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := writeKubeconfig(path, c.serverURL, c.pki.CACert, "system:serviceaccount:"+namespace+":"+name, tr.Status.Token); err != nil {
		return nil, "", err
	}
	return cfg, path, nil
}
