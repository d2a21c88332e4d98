package main

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// versionVariable is the variable the linker stamps with the release
// version, as the Makefile's build target does; the commit is not stamped
// by the linker but recorded by the Go toolchain (-buildvcs), and
// pkg/version reads it back from the build info.
const versionVariable = "fenceline.io/fenceline/pkg/version.Version"

// command is one binary of the release: its name, the main package it is
// built from (relative to the repository) and, when it has an image built
// here, that image's name and description.
type command struct {
	Name        string
	Package     string
	Image       string
	Description string
}

// commands are the release's binaries, the `make build` set. The fence
// agent's image needs Debian packages and stays with the Dockerfile, so it
// has no Image here.
var commands = []command{
	{Name: "fenceline-attacher", Package: "./cmd/fenceline-attacher", Image: "fenceline-attacher",
		Description: "Fenceline attacher: drop-in replacement for the kubernetes-csi external-attacher that detaches from dead nodes with a fence"},
	{Name: "fenceline-controller", Package: "./cmd/fenceline-controller", Image: "fenceline-controller",
		Description: "Fenceline controller: force-deletes pods stuck on dead nodes and fences dead nodes before their volumes move"},
	{Name: "fenceline-fence-agent", Package: "./cmd/fenceline-fence-agent"},
	{Name: "kubectl-fenceline", Package: "./cmd/kubectl-fenceline"},
	{Name: "mock-driver", Package: "./mock-driver", Image: "fenceline-mock-driver",
		Description: "Fenceline mock CSI driver with fencing, for tests and demos only"},
}

// binary is a built release binary.
type binary struct {
	Command command
	Arch    string
	// Path is the file's path relative to the release directory.
	Path   string
	SHA256 string
	Info   *debug.BuildInfo
}

// revision is the commit the binary reports, as pkg/version computes it:
// the VCS revision, "-dirty" when the tree had local changes.
func (b binary) revision() string {
	rev, modified := buildSetting(b.Info, "vcs.revision"), buildSetting(b.Info, "vcs.modified")
	switch {
	case rev == "":
		return "unknown"
	case modified == "true":
		return rev + "-dirty"
	}
	return rev
}

// commitTime is the time of the commit the binary was built from, zero
// when the build recorded none.
func (b binary) commitTime() time.Time {
	t, err := time.Parse(time.RFC3339, buildSetting(b.Info, "vcs.time"))
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// buildSetting returns the build setting key of info, "" when absent.
func buildSetting(info *debug.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// binaryName is the release file name of a command for an architecture;
// names are unique across architectures so that the files can be uploaded
// side by side.
func binaryName(name, arch string) string {
	return name + "-linux-" + arch
}

// buildBinaries cross-compiles every command for linux/arch into
// <dir>/bin: static (CGO_ENABLED=0), without local paths (-trimpath),
// stamped with the version and the commit.
func buildBinaries(ctx context.Context, cfg config, dir, arch string) ([]binary, error) {
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return nil, fmt.Errorf("creating the build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	args := []string{"build", "-trimpath", "-buildvcs=true",
		"-ldflags", "-s -w -X " + versionVariable + "=" + cfg.Version, "-o", work + string(filepath.Separator)}
	for _, c := range commands {
		args = append(args, c.Package)
	}
	cmd := exec.CommandContext(ctx, cfg.Go, args...)
	cmd.Dir = cfg.Repo
	// GOAMD64 and GOARM64 at their baselines, so that the binaries run on
	// every machine of the architecture whatever this machine's settings;
	// no workspace and no GOFLAGS (build tags, -mod, -buildvcs), so that
	// the build is the main module's alone, with only the flags above.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOAMD64=v1", "GOARM64=v8.0", "GOWORK=off", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build for linux/%s: %w", arch, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, fmt.Errorf("creating bin: %w", err)
	}
	var out []binary
	for _, c := range commands {
		b, err := collectBinary(c, arch, filepath.Join(work, filepath.Base(c.Package)), dir)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// collectBinary moves a built binary into the release's bin directory and
// reads its checksum and build info.
func collectBinary(c command, arch, built, dir string) (binary, error) {
	rel := filepath.Join("bin", binaryName(c.Name, arch))
	if err := os.Rename(built, filepath.Join(dir, rel)); err != nil {
		return binary{}, fmt.Errorf("moving %s into the release: %w", c.Name, err)
	}
	sum, err := fileSHA256(filepath.Join(dir, rel))
	if err != nil {
		return binary{}, err
	}
	info, err := buildinfo.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return binary{}, fmt.Errorf("reading the build info of %s: %w", rel, err)
	}
	if info.GoVersion == "" || info.Main.Path == "" {
		return binary{}, fmt.Errorf("%s: the build info names no main module", rel)
	}
	return binary{Command: c, Arch: arch, Path: filepath.ToSlash(rel), SHA256: sum, Info: info}, nil
}

// checkVersionOutput runs a binary built for this machine with --version
// and checks that it reports the release version, so that a release never
// ships binaries that were not stamped.
func checkVersionOutput(ctx context.Context, path, version string) error {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Errorf("running %s --version: %w", filepath.Base(path), err)
	}
	if !strings.Contains(string(out), " "+version+" (commit ") {
		return fmt.Errorf("%s --version printed %q, want version %s with its commit", filepath.Base(path), strings.TrimSpace(string(out)), version)
	}
	return nil
}
