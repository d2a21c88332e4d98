package main

import (
	"encoding/json"
	"net/url"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/chart"
)

var (
	spdxIDPattern = regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	hexSHA256     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// checkSPDX parses an SPDX 2.3 JSON document and checks what every
// consumer relies on: the document's identity and creation, unique
// package IDs, well-formed checksums and purls, and relationships between
// elements that exist, with the document describing something.
func checkSPDX(t *testing.T, name string, data []byte) spdxDocument {
	t.Helper()
	var doc spdxDocument
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	u, err := url.Parse(doc.DocumentNamespace)
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != spdxDocumentID || doc.Name == "" ||
		err != nil || !u.IsAbs() || u.Fragment != "" {
		t.Errorf("%s: header %q %q %q %q %q", name, doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.Name, doc.DocumentNamespace)
	}
	if _, err := time.Parse(time.RFC3339, doc.CreationInfo.Created); err != nil || !strings.HasSuffix(doc.CreationInfo.Created, "Z") ||
		len(doc.CreationInfo.Creators) == 0 || !strings.HasPrefix(doc.CreationInfo.Creators[0], "Tool: ") {
		t.Errorf("%s: creationInfo %+v", name, doc.CreationInfo)
	}
	ids := map[string]bool{spdxDocumentID: true}
	for _, p := range doc.Packages {
		if !spdxIDPattern.MatchString(p.SPDXID) || ids[p.SPDXID] || p.Name == "" || p.DownloadLocation == "" {
			t.Errorf("%s: package %+v: bad or repeated SPDXID, or no name or downloadLocation", name, p)
		}
		ids[p.SPDXID] = true
		for _, c := range p.Checksums {
			if c.Algorithm != "SHA256" || !hexSHA256.MatchString(c.ChecksumValue) {
				t.Errorf("%s: package %s: checksum %+v", name, p.Name, c)
			}
		}
		for _, r := range p.ExternalRefs {
			if r.ReferenceType != "purl" || !strings.HasPrefix(r.ReferenceLocator, "pkg:") || strings.ContainsAny(r.ReferenceLocator, " +") {
				t.Errorf("%s: package %s: external ref %+v", name, p.Name, r)
			}
		}
	}
	describes := 0
	for _, r := range doc.Relationships {
		if !ids[r.SpdxElementID] || !ids[r.RelatedSpdxElement] || r.RelationshipType == "" {
			t.Errorf("%s: relationship %+v relates an unknown element", name, r)
		}
		if r.SpdxElementID == spdxDocumentID && r.RelationshipType == "DESCRIBES" {
			describes++
		}
	}
	if describes != 1 {
		t.Errorf("%s: the document describes %d packages, want 1", name, describes)
	}
	return doc
}

// pkgByName returns the document's packages by name (the last of a name).
func pkgByName(doc spdxDocument) map[string]spdxPackage {
	out := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		out[p.Name] = p
	}
	return out
}

const grpcSum = "h1:xI8rEEKSfEqxA2NcIaNHjXDMiDW6VuE6fN3RqnYv3Ls="

var testRelease = releaseInfo{Version: "v0.4.0", Revision: "abc123", Source: "https://example.com/fenceline", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

// testBinary is a binary with the build info of a Fenceline build: a
// module from the proxy, one replaced by a directory, one +incompatible.
func testBinary(arch string) binary {
	return binary{
		Command: commands[1], Arch: arch, Path: "bin/fenceline-controller-linux-" + arch,
		SHA256: strings.Repeat("ab", 32),
		Info: &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "fenceline.io/fenceline", Version: "v0.0.0-20260101000000-abcdefabcdef+dirty"},
			Deps: []*debug.Module{
				{Path: "google.golang.org/grpc", Version: "v1.83.2", Sum: grpcSum},
				{Path: "fenceline.io/fenceline/pkg/fence", Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "./pkg/fence"}},
				{Path: "github.com/evanphx/json-patch", Version: "v5.9.11+incompatible", Sum: grpcSum},
			},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}},
		},
	}
}

func TestBinarySBOM(t *testing.T) {
	s := binarySBOM(testRelease, testBinary("amd64"))
	data, err := json.Marshal(s.doc)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSPDX(t, "binary", data)
	pkgs := pkgByName(doc)
	if p := pkgs["fenceline-controller"]; p.VersionInfo != "v0.4.0" || p.Checksums[0].ChecksumValue != strings.Repeat("ab", 32) ||
		p.PackageFileName != "bin/fenceline-controller-linux-amd64" || !strings.Contains(p.SourceInfo, "abc123") {
		t.Errorf("binary package %+v", p)
	}
	if p := pkgs["fenceline.io/fenceline"]; p.VersionInfo != "v0.4.0" || p.ExternalRefs[0].ReferenceLocator != "pkg:golang/fenceline.io/fenceline@v0.4.0" {
		t.Errorf("main module %+v, want the release version", p)
	}
	grpc := pkgs["google.golang.org/grpc"]
	if grpc.VersionInfo != "v1.83.2" || len(grpc.Checksums) != 1 || h1ToSHA256(grpcSum) != grpc.Checksums[0].ChecksumValue ||
		!strings.Contains(grpc.Comment, grpcSum) {
		t.Errorf("grpc %+v, want its version and go.sum hash", grpc)
	}
	if p := pkgs["fenceline.io/fenceline/pkg/fence"]; p.VersionInfo != noAssertion || !strings.Contains(p.Comment, "./pkg/fence") {
		t.Errorf("replaced module %+v", p)
	}
	if p := pkgs["github.com/evanphx/json-patch"]; p.ExternalRefs[0].ReferenceLocator != "pkg:golang/github.com/evanphx/json-patch@v5.9.11%2Bincompatible" {
		t.Errorf("+incompatible purl %q", p.ExternalRefs[0].ReferenceLocator)
	}
	if p := pkgs["stdlib"]; p.VersionInfo != "go1.26.8" || p.ExternalRefs[0].ReferenceLocator != "pkg:golang/stdlib@1.26.8" {
		t.Errorf("stdlib %+v", p)
	}
	if len(doc.Packages) != 6 || len(doc.Relationships) != 6 {
		t.Errorf("%d packages and %d relationships, want the binary, 5 modules (main, 3 deps, stdlib), DESCRIBES and 5 CONTAINS", len(doc.Packages), len(doc.Relationships))
	}
}

func TestImageSBOM(t *testing.T) {
	img := builtImage{Name: "fenceline-controller", Dir: "images/fenceline-controller", Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("01", 32)},
		Platforms: []platformImage{
			{Binary: testBinary("amd64"), Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("02", 32)}},
			{Binary: testBinary("arm64"), Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("03", 32)}},
		}}
	ca := caBundle{SHA256: strings.Repeat("04", 32), Roots: 140, Skipped: 3, Module: debug.Module{Path: caBundleModule, Version: "v0.0.0-20261030153154-30a33513ff6d", Sum: grpcSum}}
	data, err := json.Marshal(imageSBOM(testRelease, img, ca).doc)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSPDX(t, "image", data)
	count := map[string]int{}
	for _, p := range doc.Packages {
		count[p.Name]++
	}
	// The index and its two images; the two binaries; each module once.
	want := map[string]int{"fenceline-controller": 5, "ca-certificates": 1, "google.golang.org/grpc": 1, "fenceline.io/fenceline": 1, "stdlib": 1}
	for name, n := range want {
		if count[name] != n {
			t.Errorf("%d packages named %s, want %d", count[name], name, n)
		}
	}
	if p := pkgByName(doc)["ca-certificates"]; p.PackageFileName != "/etc/ssl/certs/ca-certificates.crt" || p.Checksums[0].ChecksumValue != ca.SHA256 ||
		!strings.Contains(p.ExternalRefs[0].ReferenceLocator, caBundleModule+"@v0.0.0-20261030153154-30a33513ff6d") {
		t.Errorf("CA bundle %+v", p)
	}
	if got := doc.Packages[0].ExternalRefs[0].ReferenceLocator; got != "pkg:oci/fenceline-controller@sha256%3A"+img.Digest.Hex+"?tag=v0.4.0" {
		t.Errorf("index purl %q", got)
	}
}

func TestChartSBOM(t *testing.T) {
	c := packagedChart{Path: "charts/fenceline-0.4.0.tgz", SHA256: strings.Repeat("05", 32),
		Metadata:     &chart.Metadata{Name: "fenceline", Version: "0.4.0", AppVersion: "v0.4.0"},
		Dependencies: []*chart.Dependency{{Name: "common", Version: "2.0.0", Repository: "https://charts.example.com"}},
		Images:       []chartImage{{Repository: "registry.example.com/fenceline-controller", Tag: "v0.4.0"}, {Repository: "fenceline-fence-agent", Tag: "v0.4.0"}}}
	built := []builtImage{{Name: "fenceline-controller", Dir: "images/fenceline-controller", Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("06", 32)}}}
	data, err := json.Marshal(chartSBOM(testRelease, c, built).doc)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := pkgByName(checkSPDX(t, "chart", data))
	if p := pkgs["fenceline"]; p.VersionInfo != "0.4.0" || !strings.Contains(p.Comment, "appVersion v0.4.0") {
		t.Errorf("chart %+v", p)
	}
	if p := pkgs["common"]; p.DownloadLocation != "https://charts.example.com" {
		t.Errorf("dependency %+v", p)
	}
	controller := pkgs["registry.example.com/fenceline-controller"]
	if len(controller.Checksums) != 1 || controller.ExternalRefs[0].ReferenceLocator !=
		"pkg:oci/fenceline-controller@sha256%3A"+strings.Repeat("06", 32)+"?repository_url=registry.example.com%2Ffenceline-controller&tag=v0.4.0" {
		t.Errorf("built image %+v", controller)
	}
	if p := pkgs["fenceline-fence-agent"]; len(p.Checksums) != 0 || !strings.Contains(p.Comment, "Dockerfile") {
		t.Errorf("image not built here %+v", p)
	}
}

func TestSPDXIDsStayUnique(t *testing.T) {
	s := newSBOM("x", "y", testRelease)
	a, b := s.add(spdxPackage{Name: "a"}, "Go/Module@v1"), s.add(spdxPackage{Name: "b"}, "Go-Module-v1")
	if a != "SPDXRef-Go-Module-v1" || b != "SPDXRef-Go-Module-v1-2" {
		t.Errorf("IDs %q and %q", a, b)
	}
}

func TestH1ToSHA256(t *testing.T) {
	if got := h1ToSHA256(grpcSum); !hexSHA256.MatchString(got) {
		t.Errorf("h1ToSHA256(%q) = %q", grpcSum, got)
	}
	for _, bad := range []string{"", "h1:", "h1:!!", "h2:xI8rEEKSfEqxA2NcIaNHjXDMiDW6VuE6fN3RqnYv3Ls=", "h1:YWJj"} {
		if got := h1ToSHA256(bad); got != "" {
			t.Errorf("h1ToSHA256(%q) = %q, want empty", bad, got)
		}
	}
}
