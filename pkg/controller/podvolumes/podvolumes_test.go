package podvolumes

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestPodVolumes(t *testing.T) {
	pvcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	add := func(idx cache.Indexer, obj any) {
		t.Helper()
		if err := idx.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	add(drivers, testobj.CSIDriver("safe.example", map[string]string{names.SafeDetachAnnotation: "true"}))
	add(drivers, testobj.CSIDriver("other.example", map[string]string{names.SafeDetachAnnotation: "false"}))
	add(pvcs, testobj.PVC("ns", "data", "pv-data"))
	add(pvs, testobj.CSIPV("pv-data", "safe.example", "h1", v1.ReadWriteOnce))
	add(pvcs, testobj.PVC("ns", "shared", "pv-shared"))
	add(pvs, testobj.CSIPV("pv-shared", "safe.example", "h2", v1.ReadWriteMany))
	add(pvcs, testobj.PVC("ns", "logs", "pv-logs"))
	add(pvs, testobj.CSIPV("pv-logs", "other.example", "h3", v1.ReadWriteOnce))
	add(pvcs, testobj.PVC("ns", "p-scratch", "pv-scratch")) // generic ephemeral
	add(pvs, testobj.CSIPV("pv-scratch", "safe.example", "h4", v1.ReadWriteOnce))
	add(pvcs, testobj.PVC("ns", "pending", ""))
	add(pvcs, testobj.PVC("ns", "local", "pv-local"))
	local := testobj.CSIPV("pv-local", "", "", v1.ReadWriteOnce)
	local.Spec.CSI, local.Spec.Local = nil, &v1.LocalVolumeSource{Path: "/mnt/disk"}
	add(pvs, local)
	r := &Resolver{
		pvcs:    corelisters.NewPersistentVolumeClaimLister(pvcs),
		pvs:     corelisters.NewPersistentVolumeLister(pvs),
		drivers: storagelisters.NewCSIDriverLister(drivers),
	}
	pod := testobj.Pod("ns", "p",
		testobj.Claim("data", "data"), testobj.Claim("shared", "shared"), testobj.Claim("logs", "logs"),
		testobj.WithVolume(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}),
		testobj.Claim("pending", "pending"), testobj.Claim("missing", "missing"), testobj.Claim("local", "local"),
		testobj.EmptyDir("tmp"), testobj.HostPath("host", "/etc"), testobj.InlineCSI("inline", "safe.example"),
		testobj.WithVolume(v1.Volume{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}),
	)
	got, err := r.PodVolumes(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Volume{
		"data":    {Name: "data", Kind: KindCSI, Driver: "safe.example", Handle: "h1", PV: "pv-data", SafeDetach: true},
		"shared":  {Name: "shared", Kind: KindCSI, Driver: "safe.example", Handle: "h2", PV: "pv-shared", SafeDetach: true, RWX: true},
		"logs":    {Name: "logs", Kind: KindCSI, Driver: "other.example", Handle: "h3", PV: "pv-logs"},
		"scratch": {Name: "scratch", Kind: KindCSI, Driver: "safe.example", Handle: "h4", PV: "pv-scratch", SafeDetach: true},
		"pending": {Name: "pending", Kind: KindUnresolved, Detail: "PVC ns/pending is not bound"},
		"missing": {Name: "missing", Kind: KindUnresolved, Detail: "PVC ns/missing not found"},
		"local":   {Name: "local", Kind: KindNodeLocal, PV: "pv-local", Detail: "PV pv-local is node-local"},
		"tmp":     {Name: "tmp", Kind: KindHarmless},
		"host":    {Name: "host", Kind: KindNodeLocal, Detail: "hostPath"},
		"inline":  {Name: "inline", Kind: KindInlineCSI, Driver: "safe.example"},
		"nfs":     {Name: "nfs", Kind: KindOther, Detail: "volume type Fenceline cannot fence"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d volumes, want %d: %+v", len(got), len(want), got)
	}
	for _, v := range got {
		if w := want[v.Name]; v != w {
			t.Errorf("volume %s: got %+v, want %+v", v.Name, v, w)
		}
	}
}

func TestSafeDetach(t *testing.T) {
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, d := range []*storagev1.CSIDriver{
		testobj.CSIDriver("true.example", map[string]string{names.SafeDetachAnnotation: "true"}),
		testobj.CSIDriver("yes.example", map[string]string{names.SafeDetachAnnotation: "yes"}),
		testobj.CSIDriver("plain.example", nil),
	} {
		if err := drivers.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	r := &Resolver{drivers: storagelisters.NewCSIDriverLister(drivers)}
	for _, tc := range []struct {
		name   string
		driver string
		want   bool
	}{
		{"annotated true", "true.example", true},
		{"annotated other value", "yes.example", false},
		{"not annotated", "plain.example", false},
		{"no CSIDriver", "missing.example", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := r.SafeDetach(tc.driver); err != nil || got != tc.want {
				t.Errorf("safeDetach(%s) = %v, %v; want %v", tc.driver, got, err, tc.want)
			}
		})
	}
}
