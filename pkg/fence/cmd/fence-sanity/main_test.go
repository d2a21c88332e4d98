package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"fenceline.io/fenceline/pkg/fence/sanity"
)

func TestFlagErrorsExit2(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{name: "no controller endpoint", args: nil, want: 2, wantErr: "--controller-endpoint is required"},
		{name: "bad endpoint", args: []string{"--controller-endpoint=csi.sock"}, want: 2, wantErr: "want unix:///path"},
		{name: "bad node endpoint", args: []string{"--controller-endpoint=/c", "--node-endpoint=n1="}, want: 2, wantErr: "empty endpoint"},
		{name: "unknown flag", args: []string{"--controller-endpoint=/c", "--nope"}, want: 2, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"--controller-endpoint=/c", "extra"}, want: 2, wantErr: "unexpected arguments"},
		{name: "bad parameter", args: []string{"--controller-endpoint=/c", "--parameter=novalue"}, want: 2, wantErr: "want key=value"},
		{name: "bad run pattern", args: []string{"--controller-endpoint=/c", "--run=("}, want: 2, wantErr: "--run"},
		{name: "help", args: []string{"-h"}, want: 0, wantErr: "-io-command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(context.Background(), tc.args, &stdout, &stderr); got != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", got, tc.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErr, stderr.String())
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	cfg, verbose, err := parseFlags([]string{
		"--controller-endpoint=unix:///run/c.sock",
		"--node-endpoint=node-1=unix:///run/n1.sock", "--node-endpoint=/run/n2.sock",
		"--volume-id=vol-1", "--volume-context=k=v", "--parameter=p=q", "--block",
		"--io-command=true", "--run=fence", "-v",
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := []sanity.Node{{ID: "node-1", Endpoint: "unix:///run/n1.sock"}, {Endpoint: "/run/n2.sock"}}
	if len(cfg.Nodes) != 2 || cfg.Nodes[0] != want[0] || cfg.Nodes[1] != want[1] {
		t.Errorf("nodes %+v, want %+v", cfg.Nodes, want)
	}
	if cfg.VolumeID != "vol-1" || cfg.VolumeContext["k"] != "v" || cfg.Parameters["p"] != "q" || !verbose {
		t.Errorf("config %+v, verbose %v", cfg, verbose)
	}
	if cfg.VolumeCapability.GetBlock() == nil || cfg.VolumeCapability.GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("volume capability %v, want a SINGLE_NODE_WRITER block volume", cfg.VolumeCapability)
	}
	if cfg.IO == nil || cfg.Run == nil || !cfg.Run.MatchString("fence-cuts-io") {
		t.Errorf("io %v, run %v", cfg.IO, cfg.Run)
	}
}

func TestCommandHook(t *testing.T) {
	tests := []struct {
		name     string
		template string
		wantErr  string
	}{
		{name: "placeholders are quoted", template: `test {volume} = "vol 'a'" && test {node} = node-1`},
		{name: "environment", template: `test "$FENCE_SANITY_VOLUME_ID" = "vol 'a'" && test "$FENCE_SANITY_NODE_ID" = node-1`},
		{name: "non-zero exit is a failed write", template: `echo refused >&2; exit 3`, wantErr: "refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CommandHook(tc.template).Write(context.Background(), "vol 'a'", "node-1")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Write = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
