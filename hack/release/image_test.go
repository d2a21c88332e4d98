package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestCABundle(t *testing.T) {
	ca, err := newCABundle()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM) || ca.Roots < 100 || ca.Module.Path != caBundleModule {
		t.Errorf("bundle of %d roots (%d skipped) from %+v: want over 100 roots that parse", ca.Roots, ca.Skipped, ca.Module)
	}
}

// readTar returns the entries of a tar stream by name, with the contents
// of regular files.
func readTar(t *testing.T, r io.Reader) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	headers, files := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, files
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[strings.TrimPrefix(h.Name, "/")] = h
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, "/")] = data
		}
	}
}

func TestBaseLayer(t *testing.T) {
	var buf bytes.Buffer
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := writeTar(&buf, baseEntries([]byte("certs")), mtime); err != nil {
		t.Fatal(err)
	}
	headers, files := readTar(t, &buf)
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") || !strings.Contains(string(files["etc/group"]), "nonroot:x:65532:") {
		t.Errorf("passwd %q, group %q: want the non-root user 65532", files["etc/passwd"], files["etc/group"])
	}
	if string(files[caBundlePath]) != "certs" {
		t.Errorf("CA bundle %q", files[caBundlePath])
	}
	if h := headers["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp %+v, want mode 1777", h)
	}
	if h := headers[nonrootHome+"/"]; h == nil || h.Uid != nonrootUID || h.Gid != nonrootUID {
		t.Errorf("home %+v, want it owned by the non-root user", h)
	}
	for name, h := range headers {
		if !h.ModTime.Equal(mtime) || h.Uname != "" {
			t.Errorf("%s: time %v, user name %q; want the release's time and no names, for reproducible layers", name, h.ModTime, h.Uname)
		}
	}
}

// TestBuildImageLayout builds a two-architecture image of a stand-in
// binary and reads the layout back as a registry client would.
func TestBuildImageLayout(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	var bins []binary
	for _, arch := range []string{"amd64", "arm64"} {
		b := testBinary(arch)
		if err := os.WriteFile(filepath.Join(dir, b.Path), []byte("program for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, b)
	}
	meta := imageMeta{Version: "v0.4.0", Revision: "abc123", Source: "https://example.com/fenceline", Created: testRelease.Created}
	base, err := newLayer(baseEntries([]byte("certs")), meta.Created)
	if err != nil {
		t.Fatal(err)
	}
	img, err := buildImage(meta, bins, dir, base)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(dir, img.Dir), func(p string, d fs.DirEntry, err error) error {
		if info, ierr := d.Info(); err == nil && ierr == nil && !d.IsDir() && info.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644 so that any user can push the layout", p, info.Mode().Perm())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	idx := readLayoutIndex(t, filepath.Join(dir, img.Dir), "v0.4.0")
	if d, _ := idx.Digest(); d != img.Digest {
		t.Errorf("layout index %s, built %s", d, img.Digest)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range m.Manifests {
		platforms = append(platforms, desc.Platform.String())
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest media type %s", desc.MediaType)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64/v8"}) || m.Annotations["org.opencontainers.image.version"] != "v0.4.0" {
		t.Errorf("index platforms %q, annotations %v", platforms, m.Annotations)
	}
	arm, err := idx.Image(m.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkImageConfig(t, arm, "fenceline-controller", meta, "arm64")
	_, files := readTar(t, mutate.Extract(arm))
	if string(files["fenceline-controller"]) != "program for arm64" || string(files[caBundlePath]) != "certs" {
		t.Errorf("arm64 file system %v, want its program and the CA bundle", slices.Sorted(maps.Keys(files)))
	}
}

// readLayoutIndex opens an OCI layout and returns the image index its
// index.json names with the release's tag.
func readLayoutIndex(t *testing.T, dir, version string) v1.ImageIndex {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("layout %s: %v", dir, err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[refNameAnnotation] != version || m.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("layout %s index.json %+v, want one image index named %s", dir, m.Manifests, version)
	}
	idx, err := l.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// checkImageConfig checks an image's config: non-root user, entrypoint,
// platform and OCI labels.
func checkImageConfig(t *testing.T, img v1.Image, name string, meta imageMeta, arch string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/" + name}) || len(c.Cmd) != 0 || cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("%s/%s config: user %q, entrypoint %q, cmd %q, platform %s/%s", name, arch, c.User, c.Entrypoint, c.Cmd, cf.OS, cf.Architecture)
	}
	for key, want := range map[string]string{"version": meta.Version, "revision": meta.Revision, "source": meta.Source} {
		if got := c.Labels["org.opencontainers.image."+key]; got != want {
			t.Errorf("%s/%s label %s = %q, want %q", name, arch, key, got, want)
		}
	}
}
