package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// fenceAgentNote is said in the output and the release notes' summary: the
// fence agent's image is not among the release's OCI layouts.
const fenceAgentNote = "fenceline-fence-agent: binaries only; its image needs Debian's fence-agents and ipmitool packages, " +
	"so it is built from the Dockerfile (make image, target fence-agent), not here (docs/release.md)"

// release builds the release cfg describes into cfg.Out. It builds into a
// temporary sibling directory and renames it at the end, so that a failed
// release leaves nothing that looks complete.
func release(ctx context.Context, cfg config, log io.Writer) error {
	notes, err := readChangelogSection(cfg.Changelog, cfg.Version)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Out); err == nil {
		return fmt.Errorf("%s already exists: remove it to build %s again", cfg.Out, cfg.Version)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking the release directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
		return fmt.Errorf("creating the release directory's parent: %w", err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(cfg.Out), "."+filepath.Base(cfg.Out)+".partial-")
	if err != nil {
		return fmt.Errorf("creating the release directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("creating the release directory: %w", err)
	}
	if err := buildRelease(ctx, cfg, dir, notes, log); err != nil {
		return err
	}
	if err := os.Rename(dir, cfg.Out); err != nil {
		return fmt.Errorf("moving the release into place: %w", err)
	}
	fmt.Fprintf(log, ">> release %s in %s\n", cfg.Version, cfg.Out)
	fmt.Fprintf(log, ">> note: %s\n", fenceAgentNote)
	return nil
}

// buildRelease writes every artifact of the release into dir.
func buildRelease(ctx context.Context, cfg config, dir, notes string, log io.Writer) error {
	byArch, all := map[string][]binary{}, []binary(nil)
	for i, arch := range cfg.Arches {
		fmt.Fprintf(log, ">> [%d/%d] building the binaries for linux/%s\n", i+1, len(cfg.Arches), arch)
		bins, err := buildBinaries(ctx, cfg, dir, arch)
		if err != nil {
			return err
		}
		if err := checkHostBinaries(ctx, dir, bins, cfg.Version); err != nil {
			return err
		}
		byArch[arch], all = bins, append(all, bins...)
	}
	r, err := newReleaseInfo(cfg, all)
	if err != nil {
		return err
	}
	if strings.HasSuffix(r.Revision, "-dirty") {
		fmt.Fprintf(log, ">> warning: the working tree has local changes; the binaries report commit %s\n", r.Revision)
	}
	fmt.Fprintln(log, ">> writing the binaries' SBOMs")
	for _, b := range all {
		if err := binarySBOM(r, b).write(filepath.Join(dir, filepath.FromSlash(b.Path)+".spdx.json")); err != nil {
			return err
		}
	}
	images, err := buildImages(cfg, dir, byArch, r, log)
	if err != nil {
		return err
	}
	fmt.Fprintln(log, ">> packaging the Helm chart")
	chart, err := packageChart(cfg.Repo, cfg.Version, dir)
	if err != nil {
		return err
	}
	if err := chartSBOM(r, chart, images).write(filepath.Join(dir, filepath.FromSlash(chart.Path)+".spdx.json")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "RELEASE_NOTES.md"), []byte(releaseNotes(cfg.Version, notes, images)), 0o644); err != nil {
		return fmt.Errorf("writing the release notes: %w", err)
	}
	return writeChecksums(dir)
}

// checkHostBinaries runs the binaries that this machine can run with
// --version (see checkVersionOutput); those of other architectures are
// checked by the release test through their images.
func checkHostBinaries(ctx context.Context, dir string, bins []binary, version string) error {
	if runtime.GOOS != "linux" || len(bins) == 0 || bins[0].Arch != runtime.GOARCH {
		return nil
	}
	for _, b := range bins {
		if err := checkVersionOutput(ctx, filepath.Join(dir, filepath.FromSlash(b.Path)), version); err != nil {
			return err
		}
	}
	return nil
}

// newReleaseInfo takes the revision from the binaries, which must agree
// (a commit or checkout between two architectures' builds would mix two
// trees in one release),
// and the release's time from SOURCE_DATE_EPOCH, else from the commit, so
// that images and SBOMs built twice from one commit are the same.
func newReleaseInfo(cfg config, bins []binary) (releaseInfo, error) {
	r := releaseInfo{Version: cfg.Version, Source: cfg.Source, Revision: bins[0].revision(), Created: bins[0].commitTime()}
	for _, b := range bins {
		if b.revision() != r.Revision {
			return releaseInfo{}, fmt.Errorf("%s reports commit %s, %s reports %s: the tree changed during the build", b.Path, b.revision(), bins[0].Path, r.Revision)
		}
	}
	if r.Revision == "unknown" {
		return releaseInfo{}, errors.New("the binaries record no VCS revision: build the release from a git checkout")
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return releaseInfo{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
		}
		r.Created = time.Unix(sec, 0).UTC()
	}
	if r.Created.IsZero() {
		r.Created = time.Now().UTC().Truncate(time.Second)
	}
	return r, nil
}

// buildImages builds the multi-arch image of every command that has one,
// and its SBOM.
func buildImages(cfg config, dir string, byArch map[string][]binary, r releaseInfo, log io.Writer) ([]builtImage, error) {
	ca, err := newCABundle()
	if err != nil {
		return nil, err
	}
	base, err := newLayer(baseEntries(ca.PEM), r.Created)
	if err != nil {
		return nil, err
	}
	meta := r
	var images []builtImage
	for i, c := range commands {
		if c.Image == "" {
			continue
		}
		var bins []binary
		for _, arch := range cfg.Arches {
			bins = append(bins, byArch[arch][i])
		}
		fmt.Fprintf(log, ">> image %s (%d architectures)\n", c.Image, len(bins))
		img, err := buildImage(meta, bins, dir, base)
		if err != nil {
			return nil, err
		}
		if err := imageSBOM(r, img, ca).write(filepath.Join(dir, filepath.FromSlash(img.Dir)+".spdx.json")); err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	return images, nil
}

// releaseNotes is the changelog's section for the release followed by the
// images' digests, which pin what was released.
func releaseNotes(version, notes string, images []builtImage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fenceline %s\n\n%s\n## Images\n\n", version, notes)
	for _, img := range images {
		fmt.Fprintf(&b, "- `%s:%s` `%s` (OCI layout `%s`)\n", img.Name, version, img.Digest, img.Dir)
	}
	fmt.Fprintf(&b, "\n%s.\n", fenceAgentNote)
	return b.String()
}
