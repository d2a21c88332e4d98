package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const changelogText = `# Changelog

All notable changes are documented in this file.

## [Unreleased]

- Not yet.

## [v0.2.0-rc.1] - 2026-03-01

- A candidate.

## [v0.1.0] - 2026-02-01

### Added

- The first release.

## 0.0.9

## [0.0.8]

- Without the v.

[Unreleased]: https://example.com/compare/v0.1.0...HEAD
[v0.1.0]: https://example.com/releases/v0.1.0
`

func TestChangelogSection(t *testing.T) {
	for _, tc := range []struct {
		version, want string
	}{
		{"v0.1.0", "### Added\n\n- The first release.\n"},
		{"v0.2.0-rc.1", "- A candidate.\n"},
		{"v0.0.8", "- Without the v.\n"},
	} {
		got, err := changelogSection(changelogText, "CHANGELOG.md", tc.version)
		if err != nil || got != tc.want {
			t.Errorf("section %s = %q, %v; want %q", tc.version, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		version, wantErr string
	}{
		{"v0.3.0", "CHANGELOG.md has no section for v0.3.0"},
		{"v0.2.0", "has no section for v0.2.0"}, // only its release candidate
		{"v0.0.9", "the section for v0.0.9 is empty"},
	} {
		_, err := changelogSection(changelogText, "CHANGELOG.md", tc.version)
		if !errors.Is(err, errNoChangelogSection) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("section %s: %v, want %q", tc.version, err, tc.wantErr)
		}
	}
}

func TestReadChangelogSectionMissingFile(t *testing.T) {
	_, err := readChangelogSection(filepath.Join(t.TempDir(), "CHANGELOG.md"), "v0.1.0")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "v0.1.0") {
		t.Errorf("missing changelog: %v, want a not-exist error naming the version", err)
	}
}

// TestRepositoryChangelog: the repository's changelog keeps the Keep a
// Changelog form the release check reads.
func TestRepositoryChangelog(t *testing.T) {
	repo := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# Changelog\n") || !strings.Contains(string(data), "\n## [Unreleased]\n") {
		t.Error("CHANGELOG.md: want a \"# Changelog\" title and an \"## [Unreleased]\" section")
	}
}

// repoRoot returns the repository's root or fails the test.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := findRepo(wd)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}
