// Command release builds a Fenceline release without a container engine:
// static binaries for each architecture, OCI image layouts of the
// attacher, the controller and the mock driver, the packaged Helm chart,
// an SPDX SBOM per artifact, the release notes from CHANGELOG.md and
// SHA256SUMS. `make release VERSION=vX.Y.Z` runs it; docs/release.md says
// what it produces and how to publish it.
//
// It is a module of its own so that go-containerregistry stays out of the
// main module's requirements.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// config is the command line of a release.
type config struct {
	// Repo is the repository's root.
	Repo    string
	Version string
	// Out is the release directory; it must not exist yet.
	Out       string
	Changelog string
	Arches    []string
	// Source is the images' org.opencontainers.image.source.
	Source string
	// Go is the go command the binaries are built with.
	Go string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	if err := release(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line; the defaults put the release under
// the repository's _output/release/<version>.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var arches string
	fs.StringVar(&cfg.Version, "version", "", "Release version, vMAJOR.MINOR.PATCH[-PRERELEASE] (required)")
	fs.StringVar(&cfg.Repo, "repo", "", "Repository root (default: the fenceline.io/fenceline module above the working directory)")
	fs.StringVar(&cfg.Out, "out", "", "Release directory, which must not exist (default: <repo>/_output/release/<version>)")
	fs.StringVar(&cfg.Changelog, "changelog", "", "Changelog that must have a section for the version (default: <repo>/CHANGELOG.md)")
	fs.StringVar(&arches, "arches", "amd64,arm64", "Linux architectures to build, separated by commas or spaces")
	fs.StringVar(&cfg.Source, "source", "https://fenceline.io/fenceline", "The images' org.opencontainers.image.source")
	fs.StringVar(&cfg.Go, "go", "go", "The go command to build with")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Arches = strings.FieldsFunc(arches, func(r rune) bool { return r == ',' || r == ' ' })
	if err := cfg.complete(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// complete fills the defaults that depend on the repository and checks
// what can be checked before building anything.
func (c *config) complete() error {
	if err := validateVersion(c.Version); err != nil {
		return err
	}
	if len(c.Arches) == 0 {
		return errors.New("no architecture to build (--arches)")
	}
	if c.Repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("finding the repository: %w", err)
		}
		if c.Repo, err = findRepo(wd); err != nil {
			return err
		}
	}
	if c.Out == "" {
		c.Out = filepath.Join(c.Repo, "_output", "release", c.Version)
	}
	if c.Changelog == "" {
		c.Changelog = filepath.Join(c.Repo, "CHANGELOG.md")
	}
	return nil
}

// findRepo returns the first directory from dir up whose go.mod is the
// fenceline.io/fenceline module's.
func findRepo(dir string) (string, error) {
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module fenceline.io/fenceline\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module fenceline.io/fenceline above the working directory: pass --repo")
		}
		dir = parent
	}
}
