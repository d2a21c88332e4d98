package outofservice

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestDecide(t *testing.T) {
	t0 := testobj.Epoch
	episode := t0.Add(time.Minute)
	oos := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, episode)
	rec := testobj.Annotation(names.BootIDAnnotation, Record("boot-1", episode))
	earlier := testobj.Annotation(names.BootIDAnnotation, Record("boot-1", t0))
	legacy := testobj.Annotation(names.BootIDAnnotation, "boot-1")
	up := testobj.ReadySince(t0)
	rebooted := testobj.BootID("boot-2")

	type want struct{ record, clear, untaint bool }
	tests := []struct {
		name             string
		node             *v1.Node
		terminating, vas int
		want             want
	}{
		{"taint seen while down: record boot ID", testobj.Node("n1", testobj.NotReadySince(t0), oos), 0, 0, want{record: true}},
		{"taint without timeAdded seen while down: record (the taint gets one)", testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoSchedule)), 0, 0, want{record: true}},
		{"still down, already recorded", testobj.Node("n1", testobj.NotReadySince(t0), oos, rec), 0, 0, want{}},
		{"still down, record of an earlier taint: record again", testobj.Node("n1", testobj.NotReadySince(t0), oos, earlier), 0, 0, want{record: true}},
		{"rebooted, Ready, clean: untaint", testobj.Node("n1", up, oos, rec, rebooted), 0, 0, want{untaint: true, clear: true}},
		{"rebooted, Ready, clean, but node-fencing owns the taint: leave it to node-fencing", testobj.Node("n1", up, oos, rec, rebooted, testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-1")), 0, 0, want{}},
		{"rebooted, Ready, clean, but another fencer applied the taint: never removed", testobj.Node("n1", up, oos, rec, rebooted, testobj.Annotation(names.OutOfServiceAppliedByAnnotation, "pacemaker")), 0, 0, want{}},
		{"another fencer's taint gone: forget record", testobj.Node("n1", up, rec, testobj.Annotation(names.OutOfServiceAppliedByAnnotation, "pacemaker")), 0, 0, want{clear: true}},
		{"rebooted, Ready, but the record is of an earlier taint: no proof", testobj.Node("n1", up, oos, earlier, rebooted), 0, 0, want{}},
		{"record without a time (older format): no proof", testobj.Node("n1", up, oos, legacy, rebooted), 0, 0, want{}},
		{"taint lost its timeAdded: no proof", testobj.Node("n1", up, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute), rec, rebooted), 0, 0, want{}},
		{"Ready but same boot ID: no proven power cycle", testobj.Node("n1", up, oos, rec), 0, 0, want{}},
		{"Ready, rebooted, empty boot ID reported", testobj.Node("n1", up, oos, rec, testobj.BootID("")), 0, 0, want{}},
		{"recorded boot ID empty", testobj.Node("n1", up, oos, testobj.Annotation(names.BootIDAnnotation, Record("", episode)), rebooted), 0, 0, want{}},
		{"taint never seen while down: never removed", testobj.Node("n1", up, oos, rebooted), 0, 0, want{}},
		{"pod still terminating", testobj.Node("n1", up, oos, rec, rebooted), 1, 0, want{}},
		{"VolumeAttachment remains", testobj.Node("n1", up, oos, rec, rebooted), 0, 1, want{}},
		{"taint removed by a human: forget record", testobj.Node("n1", up, rec), 0, 0, want{clear: true}},
		{"no taint, no record", testobj.Node("n1", up), 0, 0, want{}},
		{"node deleted", nil, 0, 0, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.node, tc.terminating, tc.vas)
			if (want{got.RecordBootID, got.ClearRecord, got.Untaint}) != tc.want || got.Why == "" {
				t.Errorf("Decide() = %+v, want %+v with a reason", got, tc.want)
			}
		})
	}
}
