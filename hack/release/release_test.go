package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// archesEnv picks the architectures TestRelease builds, e.g. "amd64" for a
// quicker run on an amd64 machine; by default both, as make release.
const archesEnv = "FENCELINE_RELEASE_ARCHES"

// testVersion is the version TestRelease releases; a pre-release, so that
// the chart's SemVer and the images' tag are both exercised.
const testVersion = "v0.0.1-releasetest.1"

// TestRelease builds a whole release from this checkout into a temporary
// directory (cross-compiling takes minutes) and checks every artifact: the
// checksums, the binaries, the SBOMs, each OCI layout (whose image for
// this machine is unpacked and its entrypoint run with --version) and the
// chart.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release: minutes of cross-compiling")
	}
	arches := strings.Fields(strings.ReplaceAll(os.Getenv(archesEnv), ",", " "))
	if len(arches) == 0 {
		arches = []string{"amd64", "arm64"}
	}
	dir := t.TempDir()
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("# Changelog\n\n## ["+testVersion+"] - 2026-01-01\n\n- Release test.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config{Repo: repoRoot(t), Version: testVersion, Out: filepath.Join(dir, "release", testVersion),
		Changelog: changelog, Arches: arches, Source: "https://example.com/fenceline", Go: "go"}
	var log bytes.Buffer
	if err := release(t.Context(), cfg, &log); err != nil {
		t.Fatalf("release: %v\n%s", err, log.String())
	}
	t.Logf("release output:\n%s", log.String())
	if !strings.Contains(log.String(), "fenceline-fence-agent: binaries only") {
		t.Error("the output does not say that the fence agent's image is built from the Dockerfile")
	}
	summed, err := verifyChecksums(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range arches {
		for _, c := range commands {
			path := "bin/" + binaryName(c.Name, arch)
			if !slices.Contains(summed, path) || !slices.Contains(summed, path+".spdx.json") {
				t.Errorf("SHA256SUMS does not list %s and its SBOM", path)
			}
			checkReleaseBinary(t, filepath.Join(cfg.Out, path), arch)
			checkBinarySBOM(t, filepath.Join(cfg.Out, path+".spdx.json"), c.Name)
		}
	}
	revision := checkReleaseImages(t, cfg, arches)
	checkReleaseChart(t, cfg.Out, summed)
	notes, err := os.ReadFile(filepath.Join(cfg.Out, "RELEASE_NOTES.md"))
	if err != nil || !strings.Contains(string(notes), "- Release test.") || !strings.Contains(string(notes), "fenceline-controller:"+testVersion+"` `sha256:") {
		t.Errorf("release notes %q (%v), want the changelog section and the images' digests", notes, err)
	}
	t.Logf("released %s at commit %s for %v", testVersion, revision, arches)
}

// checkReleaseBinary checks that a binary is static, for its architecture,
// built with -trimpath and CGO_ENABLED=0, and stamped with the version.
func checkReleaseBinary(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static", path)
		}
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"GOOS": "linux", "GOARCH": arch, "CGO_ENABLED": "0", "-trimpath": "true"} {
		if got := buildSetting(info, key); got != want {
			t.Errorf("%s: build setting %s = %q, want %q", path, key, got, want)
		}
	}
	// The build info leaves -ldflags out under -trimpath, so look for the
	// stamped string itself; the image test runs this machine's binaries.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(testVersion)) {
		t.Errorf("%s does not hold the version %s: not stamped", path, testVersion)
	}
	if buildSetting(info, "vcs.revision") == "" {
		t.Errorf("%s: no VCS revision recorded", path)
	}
}

// checkBinarySBOM checks a binary's SBOM names the binary and the main
// module and lists modules with versions and checksums.
func checkBinarySBOM(t *testing.T, path, name string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSPDX(t, filepath.Base(path), data)
	pkgs := pkgByName(doc)
	if pkgs[name].VersionInfo != testVersion || pkgs["fenceline.io/fenceline"].VersionInfo != testVersion {
		t.Errorf("%s: binary %+v, main module %+v: want both at %s", path, pkgs[name], pkgs["fenceline.io/fenceline"], testVersion)
	}
	withSum := 0
	for _, p := range doc.Packages {
		if p.PrimaryPackagePurpose == "LIBRARY" && p.VersionInfo != noAssertion && len(p.Checksums) == 1 {
			withSum++
		}
	}
	if withSum < 5 {
		t.Errorf("%s: %d modules with a version and a checksum, want the binary's dependencies", path, withSum)
	}
}

// checkReleaseImages checks each image's layout, runs this machine's image
// and returns the revision the images carry.
func checkReleaseImages(t *testing.T, cfg config, arches []string) string {
	t.Helper()
	revision := ""
	for _, c := range commands {
		if c.Image == "" {
			if _, err := os.Stat(filepath.Join(cfg.Out, "images", "fenceline-fence-agent")); err == nil {
				t.Error("the release has a fence-agent image; it is the Dockerfile's")
			}
			continue
		}
		idx := readLayoutIndex(t, filepath.Join(cfg.Out, "images", c.Image), testVersion)
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range m.Manifests {
			got = append(got, d.Platform.Architecture)
		}
		if !slices.Equal(got, arches) {
			t.Errorf("%s: index architectures %q, want %q", c.Image, got, arches)
		}
		revision = m.Annotations["org.opencontainers.image.revision"]
		data, err := os.ReadFile(filepath.Join(cfg.Out, "images", c.Image+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		if pkgs := pkgByName(checkSPDX(t, c.Image+".spdx.json", data)); pkgs["fenceline.io/fenceline"].Name == "" || pkgs["ca-certificates"].Name == "" {
			t.Errorf("%s SBOM: want the main module and the CA certificates", c.Image)
		}
		i := slices.Index(arches, runtime.GOARCH)
		if runtime.GOOS != "linux" || i < 0 {
			t.Logf("%s: no image for this machine (%s/%s) to run", c.Image, runtime.GOOS, runtime.GOARCH)
			continue
		}
		img, err := idx.Image(m.Manifests[i].Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImageConfig(t, img, c.Name, imageMeta{Version: testVersion, Revision: revision, Source: cfg.Source}, runtime.GOARCH)
		runImage(t, img, c.Name, revision)
	}
	return revision
}

// runImage unpacks an image's file system, checks that it holds the
// program, the user and group files, the CA bundle and nothing else (no
// shell), and runs the entrypoint with --version.
func runImage(t *testing.T, img v1.Image, name, revision string) {
	t.Helper()
	root := t.TempDir()
	headers, files := readTar(t, mutate.Extract(img))
	want := []string{name, "etc", "etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl", "etc/ssl/certs", caBundlePath, "home", nonrootHome, "tmp"}
	var got []string
	for n := range headers {
		got = append(got, strings.TrimSuffix(n, "/"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: file system %q, want only %q (no shell)", name, got, want)
	}
	if !strings.Contains(string(files["etc/passwd"]), ":65532:65532:") {
		t.Errorf("%s: /etc/passwd %q, want the user 65532", name, files["etc/passwd"])
	}
	unpack(t, root, headers, files)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	entrypoint := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(cf.Config.Entrypoint[0], "/")))
	out, err := exec.CommandContext(t.Context(), entrypoint, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", name, err, out)
	}
	info, err := buildinfo.ReadFile(entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := " " + testVersion + " (commit " + revision + ", " + info.GoVersion + ")"
	if !strings.Contains(string(out), wantOut) {
		t.Errorf("%s --version printed %q, want %q", name, out, wantOut)
	}
}

// checkReleaseChart loads the packaged chart and checks its versions.
func checkReleaseChart(t *testing.T, dir string, summed []string) {
	t.Helper()
	path := "charts/fenceline-" + chartVersion(testVersion) + ".tgz"
	if !slices.Contains(summed, path) || !slices.Contains(summed, path+".spdx.json") {
		t.Errorf("SHA256SUMS does not list %s and its SBOM", path)
	}
	ch, err := loader.Load(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != chartVersion(testVersion) || ch.Metadata.AppVersion != testVersion || len(ch.CRDObjects()) == 0 {
		t.Errorf("chart version %q, appVersion %q, %d CRDs", ch.Metadata.Version, ch.Metadata.AppVersion, len(ch.CRDObjects()))
	}
	data, err := os.ReadFile(filepath.Join(dir, path+".spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if pkgs := pkgByName(checkSPDX(t, "chart SBOM", data)); len(pkgs["fenceline-controller"].Checksums) != 1 || pkgs["fenceline-fence-agent"].Name == "" {
		t.Errorf("chart SBOM: want the controller's image by digest and the fence agent's image")
	}
}

// unpack writes an image's flattened file system under root: directories
// and regular files with their modes (the image holds nothing else).
func unpack(t *testing.T, root string, headers map[string]*tar.Header, files map[string][]byte) {
	t.Helper()
	names := slices.Sorted(maps.Keys(headers))
	for _, n := range names {
		h := headers[n]
		clean := path.Clean(n)
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			t.Fatalf("layer entry %q leaves the root", n)
		}
		target := filepath.Join(root, filepath.FromSlash(clean))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, files[n], fs.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("layer entry %q of type %q: want only directories and regular files", n, h.Typeflag)
		}
	}
}
