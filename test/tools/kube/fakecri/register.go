package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registrar is the node-driver-registrar's job for one CSI driver: it
// answers the kubelet's plugin watcher on a socket in the kubelet's
// plugins_registry with the driver's name and node socket.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		fmt.Fprintf(os.Stderr, "fake-cri: the kubelet refused to register driver %s: %s\n", r.driver, s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// register serves the registration socket of each --register value,
// "<driver>=<node socket path>", in dir, until ctx ends.
func register(ctx context.Context, dir string, specs []string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for _, spec := range specs {
		driver, endpoint, ok := strings.Cut(spec, "=")
		if !ok || driver == "" || endpoint == "" {
			return fmt.Errorf("--register %q: want <driver>=<node socket path>", spec)
		}
		endpoint = strings.TrimPrefix(endpoint, "unix://")
		path := filepath.Join(dir, driver+"-reg.sock")
		_ = os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			return fmt.Errorf("registration socket of %s: %w", driver, err)
		}
		s := grpc.NewServer()
		registerapi.RegisterRegistrationServer(s, &registrar{driver: driver, endpoint: endpoint})
		go func() { _ = s.Serve(l) }()
		go func() { <-ctx.Done(); s.Stop(); _ = os.Remove(path) }()
	}
	return nil
}
