package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// chartDir is the chart the release packages, relative to the repository.
const chartDir = "deploy/helm/fenceline"

// chartImage is an image the chart deploys (or, for the attacher, names
// for drivers' charts), with its tag at the chart's defaults.
type chartImage struct {
	Repository string
	Tag        string
}

// packagedChart is the release's chart archive.
type packagedChart struct {
	// Path is the archive's path relative to the release directory.
	Path         string
	SHA256       string
	Metadata     *chart.Metadata
	Dependencies []*chart.Dependency
	Images       []chartImage
}

// packageChart packages the chart with its version and appVersion set for
// the release into <releaseDir>/charts/<name>-<version>.tgz, the name
// `helm push` to an OCI registry expects.
func packageChart(repo, version, releaseDir string) (packagedChart, error) {
	ch, err := loader.Load(filepath.Join(repo, chartDir))
	if err != nil {
		return packagedChart{}, fmt.Errorf("loading the chart %s: %w", chartDir, err)
	}
	ch.Metadata.Version = chartVersion(version)
	ch.Metadata.AppVersion = version
	if err := ch.Validate(); err != nil {
		return packagedChart{}, fmt.Errorf("the chart %s with version %s: %w", chartDir, ch.Metadata.Version, err)
	}
	dir := filepath.Join(releaseDir, "charts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return packagedChart{}, fmt.Errorf("creating charts: %w", err)
	}
	file, err := chartutil.Save(ch, dir)
	if err != nil {
		return packagedChart{}, fmt.Errorf("packaging the chart: %w", err)
	}
	sum, err := fileSHA256(file)
	if err != nil {
		return packagedChart{}, err
	}
	rel, err := filepath.Rel(releaseDir, file)
	if err != nil {
		return packagedChart{}, fmt.Errorf("locating the chart archive: %w", err)
	}
	return packagedChart{
		Path:         filepath.ToSlash(rel),
		SHA256:       sum,
		Metadata:     ch.Metadata,
		Dependencies: ch.Metadata.Dependencies,
		Images:       valuesImages(ch.Values, version),
	}, nil
}

// valuesImages finds the images of the chart's default values: every
// `image:` map with a repository, tagged with image.tag or the appVersion,
// as the chart's image helper does.
func valuesImages(values map[string]interface{}, appVersion string) []chartImage {
	tag, registry := appVersion, ""
	if global, ok := values["image"].(map[string]interface{}); ok {
		if t, _ := global["tag"].(string); t != "" {
			tag = t
		}
		registry, _ = global["registry"].(string)
		registry = strings.TrimSuffix(registry, "/")
	}
	seen := map[string]bool{}
	var walk func(v interface{})
	walk = func(v interface{}) {
		m, ok := v.(map[string]interface{})
		if !ok {
			return
		}
		for key, child := range m {
			if img, ok := child.(map[string]interface{}); ok && key == "image" {
				if repo, _ := img["repository"].(string); repo != "" {
					if registry != "" {
						repo = registry + "/" + repo
					}
					seen[repo] = true
				}
			}
			walk(child)
		}
	}
	walk(values)
	var out []chartImage
	for repo := range seen {
		out = append(out, chartImage{Repository: repo, Tag: tag})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Repository < out[j].Repository })
	return out
}
