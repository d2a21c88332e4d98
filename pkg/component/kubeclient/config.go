// Package kubeclient builds the Kubernetes client configuration of a
// Fenceline component and waits for its API server to answer. It is a leaf
// both binaries use, so that they reach the API server the same way.
package kubeclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options describe how a component talks to the API server.
type Options struct {
	// Kubeconfig is --kubeconfig; empty means in-cluster configuration.
	Kubeconfig string
	// Base, when set, is used instead of Kubeconfig (in-process use by
	// tests and benchmarks); it is copied, never modified.
	Base *rest.Config
	// QPS and Burst are --kube-api-qps and --kube-api-burst.
	QPS   float32
	Burst int
	// UserAgent names the component in the API server's audit log.
	UserAgent string
}

// Config returns the client configuration for o. It speaks protobuf, as
// upstream's sidecars and kube-controller-manager do: smaller and cheaper
// to decode than JSON for the built-in types every Fenceline component
// reads. JSON stays accepted, so a response the server can only encode as
// JSON (an aggregated API, say) still decodes.
func Config(o Options) (*rest.Config, error) {
	var cfg *rest.Config
	if o.Base != nil {
		cfg = rest.CopyConfig(o.Base)
	} else {
		c, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load Kubernetes client configuration: %w", err)
		}
		cfg = c
	}
	cfg.QPS = o.QPS
	cfg.Burst = o.Burst
	cfg.UserAgent = o.UserAgent
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// WithUserAgent returns a copy of cfg whose requests carry userAgent, so
// that the API server's audit log attributes them to one part of the
// component (kube-controller-manager does the same per controller).
func WithUserAgent(cfg *rest.Config, userAgent string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = userAgent
	return c
}

// JSON returns a copy of cfg that speaks JSON: custom resources (the
// fencing API) have no protobuf encoding, and Config asks for protobuf
// first.
func JSON(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	return c
}
