package kubelet

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestConnectDrivers(t *testing.T) {
	base := Config{NodeName: "node-a", Driver: "one.example.com", Endpoint: "unix:///tmp/one.sock"}
	tests := []struct {
		name    string
		others  []Driver
		want    []string
		wantErr string
	}{
		{name: "one driver", want: []string{"one.example.com"}},
		{name: "two drivers, each its own socket", others: []Driver{{Name: "two.example.com", Endpoint: "unix:///tmp/two.sock"}},
			want: []string{"one.example.com", "two.example.com"}},
		{name: "the same driver twice", others: []Driver{{Name: "one.example.com", Endpoint: "unix:///tmp/two.sock"}}, wantErr: "a name of its own"},
		{name: "a driver without a socket", others: []Driver{{Name: "two.example.com"}}, wantErr: "an endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.OtherDrivers = tc.others
			got, err := connectDrivers(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("connectDrivers = %v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeDrivers(got)
			var names []string
			for n, d := range got {
				names = append(names, n)
				if d.primary != (n == cfg.Driver) {
					t.Errorf("driver %s: primary %t", n, d.primary)
				}
			}
			if slices.Sort(names); !slices.Equal(names, tc.want) {
				t.Errorf("drivers %v, want %v", names, tc.want)
			}
		})
	}
}

// TestVolumesOfTwoDrivers: a handle two drivers both use is two volumes,
// each reported in use under its own driver (unless that driver does not
// attach) and staged under paths of its own.
func TestVolumesOfTwoDrivers(t *testing.T) {
	one := &nodeDriver{name: "one.example.com", primary: true}
	two := &nodeDriver{name: "two.example.com"}
	k := &Kubelet{cfg: Config{DataDir: "/data"}, drivers: map[string]*nodeDriver{one.name: one, two.name: two}, vols: map[volKey]*volume{
		{one.name, "vol-1"}: {driver: one, handle: "vol-1"},
		{two.name, "vol-1"}: {driver: two, handle: "vol-1"},
	}}
	want := []string{"kubernetes.io/csi/one.example.com^vol-1", "kubernetes.io/csi/two.example.com^vol-1"}
	if got := k.mountedLocked(); !slices.Equal(got, want) {
		t.Errorf("in use %v, want %v", got, want)
	}
	two.noAttach = true
	if got := k.mountedLocked(); !slices.Equal(got, want[:1]) {
		t.Errorf("in use with the second driver attaching nothing: %v, want %v", got, want[:1])
	}
	s1, t1 := k.paths(one, "vol-1")
	s2, t2 := k.paths(two, "vol-1")
	if s1 != filepath.Join("/data", "staging", "vol-1") || t1 != filepath.Join("/data", "target", "vol-1") {
		t.Errorf("first driver's paths %s, %s: want the stand-in's own", s1, t1)
	}
	if s2 == s1 || t2 == t1 || !strings.Contains(s2, two.name) {
		t.Errorf("second driver's paths %s, %s: want paths of its own", s2, t2)
	}
}
