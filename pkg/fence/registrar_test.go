package fence

import (
	"testing"

	"google.golang.org/grpc"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// recordingRegistrar stands in for a driver framework that owns its
// *grpc.Server and only hands out a grpc.ServiceRegistrar.
type recordingRegistrar struct{ services []string }

func (r *recordingRegistrar) RegisterService(desc *grpc.ServiceDesc, _ any) {
	r.services = append(r.services, desc.ServiceName)
}

func TestRegisterCapabilitiesServerOnAnyRegistrar(t *testing.T) {
	var r recordingRegistrar
	RegisterCapabilitiesServer(&r, Capabilities{UnpublishFence: true})
	want := fencev1.FenceCapabilities_ServiceDesc.ServiceName
	if len(r.services) != 1 || r.services[0] != want {
		t.Fatalf("registered %v, want [%s]", r.services, want)
	}
}
