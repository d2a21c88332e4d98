package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.22.333", "v0.2.0-rc.1", "v1.0.0-alpha-2.x"} {
		if err := validateVersion(v); err != nil {
			t.Errorf("validateVersion(%q) = %v, want nil", v, err)
		}
	}
	for _, v := range []string{"", "0.1.0", "v0.1", "v0.1.0-", "v0.1.0+build.5", "v0.1.0 ", "ace4e6d-dirty", "v0.1.0-rc_1", "V0.1.0"} {
		err := validateVersion(v)
		if err == nil || !strings.Contains(err.Error(), "VERSION") {
			t.Errorf("validateVersion(%q) = %v, want an error that names VERSION", v, err)
		}
	}
}

func TestChartVersion(t *testing.T) {
	for v, want := range map[string]string{"v0.1.0": "0.1.0", "v1.2.3-rc.1": "1.2.3-rc.1"} {
		if got := chartVersion(v); got != want {
			t.Errorf("chartVersion(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	repo := t.TempDir()
	cfg, err := parseFlags([]string{"--version=v0.3.0", "--repo=" + repo, "--arches=amd64 arm64"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Out != filepath.Join(repo, "_output", "release", "v0.3.0") || cfg.Changelog != filepath.Join(repo, "CHANGELOG.md") ||
		strings.Join(cfg.Arches, ",") != "amd64,arm64" || cfg.Go != "go" {
		t.Errorf("config %+v, want the defaults under the repository and both architectures", cfg)
	}
	if _, err := parseFlags([]string{"--version=1.0", "--repo=" + repo}, io.Discard); err == nil || !strings.Contains(err.Error(), `"1.0"`) {
		t.Errorf("bad version: %v, want an error naming it", err)
	}
	if _, err := parseFlags([]string{"--version=v1.0.0", "--repo=" + repo, "--arches="}, io.Discard); err == nil {
		t.Error("no architecture: no error")
	}
}

// TestReleaseRefusesEarly: a release without its changelog section, or
// over an existing release, fails before anything is built.
func TestReleaseRefusesEarly(t *testing.T) {
	dir := t.TempDir()
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("# Changelog\n\n## [Unreleased]\n\n- Something.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config{Repo: dir, Version: "v0.1.0", Out: filepath.Join(dir, "out", "v0.1.0"), Changelog: changelog, Arches: []string{"amd64"}, Go: "false"}
	err := release(t.Context(), cfg, io.Discard)
	if !errors.Is(err, errNoChangelogSection) || !strings.Contains(err.Error(), "## [v0.1.0] - YYYY-MM-DD") {
		t.Errorf("release without a changelog section: %v, want errNoChangelogSection saying what to add", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused release created its directory's parent (%v)", err)
	}
	if err := os.WriteFile(changelog, []byte("## [v0.1.0] - 2026-01-01\n\n- Something.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := release(t.Context(), cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("release over an existing one: %v, want a refusal", err)
	}
}
