package main

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

func TestPackageChart(t *testing.T) {
	dir := t.TempDir()
	c, err := packageChart(repoRoot(t), "v0.4.0-rc.1", dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "charts/fenceline-0.4.0-rc.1.tgz" {
		t.Errorf("archive %s, want charts/<name>-<version>.tgz", c.Path)
	}
	ch, err := loader.Load(filepath.Join(dir, c.Path))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.4.0-rc.1" || ch.Metadata.AppVersion != "v0.4.0-rc.1" {
		t.Errorf("packaged chart version %q, appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	var repos []string
	for _, img := range c.Images {
		repos = append(repos, img.Repository+":"+img.Tag)
	}
	want := "fenceline-attacher:v0.4.0-rc.1 fenceline-controller:v0.4.0-rc.1 fenceline-fence-agent:v0.4.0-rc.1"
	if strings.Join(repos, " ") != want {
		t.Errorf("chart images %q, want %q", repos, want)
	}
}

func TestValuesImages(t *testing.T) {
	values := map[string]interface{}{
		"image":      map[string]interface{}{"registry": "registry.example.com/team/", "tag": "pinned"},
		"controller": map[string]interface{}{"image": map[string]interface{}{"repository": "fenceline-controller"}},
		"sidecar":    map[string]interface{}{"nested": map[string]interface{}{"image": map[string]interface{}{"repository": "other"}}},
		"note":       map[string]interface{}{"image": "not a map"},
	}
	got := valuesImages(values, "v1.0.0")
	if len(got) != 2 || got[0] != (chartImage{"registry.example.com/team/fenceline-controller", "pinned"}) || got[1].Repository != "registry.example.com/team/other" {
		t.Errorf("images %+v", got)
	}
}
