package main

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v2"

	"fenceline.io/fenceline/pkg/fence/sanity"
)

// secretsFile is csi-sanity's secrets file (its --csi.secrets): one map of
// secrets per call. The keys of calls fence-sanity does not make (snapshots,
// expansion, ...) are accepted and unused, so one file serves both suites.
type secretsFile struct {
	CreateVolume              map[string]string `yaml:"CreateVolumeSecret"`
	DeleteVolume              map[string]string `yaml:"DeleteVolumeSecret"`
	ControllerPublishVolume   map[string]string `yaml:"ControllerPublishVolumeSecret"`
	ControllerUnpublishVolume map[string]string `yaml:"ControllerUnpublishVolumeSecret"`
	NodeStageVolume           map[string]string `yaml:"NodeStageVolumeSecret"`
	NodePublishVolume         map[string]string `yaml:"NodePublishVolumeSecret"`
	// The fence extension's own calls, which csi-sanity does not make.
	ListFences map[string]string `yaml:"ListFencesSecret"`
	LiftFence  map[string]string `yaml:"LiftFenceSecret"`
}

// loadSecrets reads a secrets file in csi-sanity's format.
func loadSecrets(path string) (sanity.Secrets, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return sanity.Secrets{}, fmt.Errorf("--secrets: %w", err)
	}
	var f secretsFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return sanity.Secrets{}, fmt.Errorf("--secrets %s: %w", path, err)
	}
	return sanity.Secrets(f), nil
}
