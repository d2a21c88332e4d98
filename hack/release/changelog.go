package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// errNoChangelogSection is returned (wrapped) when the changelog has no
// section, or an empty one, for the version being released.
var errNoChangelogSection = errors.New("no changelog section for the release")

// linkDefinition is a Markdown link reference definition, such as the
// compare links Keep a Changelog puts at the end of the file; it is not
// release notes.
var linkDefinition = regexp.MustCompile(`^\[[^\]]+\]:\s`)

// readChangelogSection reads the changelog at path and returns the body of
// the section for version (see changelogSection).
func readChangelogSection(path, version string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the changelog: %w (make release needs a CHANGELOG.md with a section for %s)", err, version)
	}
	return changelogSection(string(data), path, version)
}

// changelogSection returns the body of the Keep a Changelog section for
// version: the lines after a heading `## [v1.2.3] - 2024-05-01` (the
// brackets, the "v" and the date are optional) up to the next level-2
// heading. A release is refused without one, so that every tag has its
// notes; name is the file's name in errors.
func changelogSection(text, name, version string) (string, error) {
	heading := regexp.MustCompile(`^##\s+\[?v?` + regexp.QuoteMeta(strings.TrimPrefix(version, "v")) + `\]?(\s+-\s+.*)?\s*$`)
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	start := -1
	for i, l := range lines {
		if heading.MatchString(l) {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return "", fmt.Errorf("%s has no section for %s: add a heading \"## [%s] - YYYY-MM-DD\" with the release's changes (Keep a Changelog; usually the [Unreleased] section renamed): %w",
			name, version, version, errNoChangelogSection)
	}
	var body []string
	for _, l := range lines[start:] {
		if strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "# ") {
			break
		}
		if linkDefinition.MatchString(l) {
			continue
		}
		body = append(body, l)
	}
	notes := strings.TrimSpace(strings.Join(body, "\n"))
	if notes == "" {
		return "", fmt.Errorf("%s: the section for %s is empty: list the release's changes under it: %w", name, version, errNoChangelogSection)
	}
	return notes + "\n", nil
}
