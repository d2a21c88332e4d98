package main

import (
	"fmt"
	"regexp"
	"strings"
)

// versionPattern is the form of a release version: the tag the main module
// is released under (vMAJOR.MINOR.PATCH with an optional pre-release).
var versionPattern = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// validateVersion returns an error that says what is expected when v is not
// a release version; make passes `git describe` output by default, so the
// message names the variable to set.
func validateVersion(v string) error {
	if v == "" {
		return fmt.Errorf("no release version: set VERSION=vMAJOR.MINOR.PATCH, e.g. make release VERSION=v0.1.0")
	}
	if !versionPattern.MatchString(v) {
		return fmt.Errorf("release version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE] (e.g. v0.1.0 or v0.2.0-rc.1): set VERSION, e.g. make release VERSION=v0.1.0", v)
	}
	return nil
}

// chartVersion is the Helm chart's version for a release: SemVer 2 without
// the tag's "v", as Helm and OCI chart repositories expect (the chart's
// appVersion keeps the "v", the images' tag).
func chartVersion(v string) string {
	return strings.TrimPrefix(v, "v")
}
