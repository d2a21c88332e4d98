package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A csi-sanity secrets file is read as csi-sanity reads it: the calls
// fence-sanity makes get their maps, the keys of other calls are accepted.
func TestSecretsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	const file = `CreateVolumeSecret:
  password: create
ControllerPublishVolumeSecret:
  password: publish
ControllerUnpublishVolumeSecret:
  password: unpublish
NodeStageVolumeSecret:
  password: stage
ListFencesSecret:
  password: list
LiftFenceSecret:
  password: lift
CreateSnapshotSecret:
  password: snapshot
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := parseFlags([]string{"--controller-endpoint=/c", "--secrets=" + path}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Secrets
	for call, got := range map[string]map[string]string{
		"create": s.CreateVolume, "publish": s.ControllerPublishVolume, "unpublish": s.ControllerUnpublishVolume, "stage": s.NodeStageVolume,
		"list": s.ListFences, "lift": s.LiftFence,
	} {
		if got["password"] != call {
			t.Errorf("%s secrets %v, want password %q", call, got, call)
		}
	}
	if s.DeleteVolume != nil || s.NodePublishVolume != nil {
		t.Errorf("calls the file does not name got secrets: delete %v, node publish %v", s.DeleteVolume, s.NodePublishVolume)
	}
}

func TestSecretsFileErrorsExit2(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("CreateVolumeSecret: [not, a, map]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ path, want string }{
		"missing file": {path: filepath.Join(t.TempDir(), "none.yaml"), want: "--secrets"},
		"not a map":    {path: bad, want: "bad.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(context.Background(), []string{"--controller-endpoint=/c", "--secrets=" + tc.path}, &stdout, &stderr); got != 2 {
				t.Errorf("exit %d, want 2", got)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}
