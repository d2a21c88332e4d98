package tgt

import (
	"fmt"
	"regexp"
)

// Name prefixes of the iSCSI qualified names (IQNs, RFC 3720 section 3.2.6)
// the backend uses. The naming authority is a date and a reversed domain of
// the project, as the RFC asks; nothing outside this backend must agree on
// them except the initiators of the tests, which use InitiatorName too.
const (
	// TargetPrefix is followed by the volume ID: one target per volume.
	TargetPrefix = "iqn.2026-11.io.fenceline.mock:"
	// InitiatorPrefix is followed by the CSI node ID.
	InitiatorPrefix = "iqn.2026-11.io.fenceline.node:"
)

// LUN is the logical unit number of a volume inside its target. LUN 0 is the
// controller tgt creates for every target.
const LUN = 1

// nameChars is what this backend accepts after a prefix: the characters an
// IQN allows after its normalisation (lower-case letters, digits, '.', '-')
// minus ':', so that the mapping is one-to-one without any escaping, and at
// most 200 characters so that the whole name stays under the RFC's 223
// bytes.
var nameChars = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,199}$`)

// InitiatorName maps a CSI node ID to the initiator name that node logs in
// with: InitiatorPrefix + node ID. The mapping is one-to-one, so a grant to
// one node can never reach another. A node ID that is not a valid IQN tail
// as it stands (upper case, '_', '/', ...) is refused rather than folded:
// lower-casing "Node-A" and "node-a" to the same initiator would let a grant
// or a fence of one act on the other.
func InitiatorName(nodeID string) (string, error) {
	if !nameChars.MatchString(nodeID) {
		return "", fmt.Errorf("node ID %q cannot name an iSCSI initiator: the tgt backend needs lower-case letters, digits, '.' and '-' (at most 200, starting with a letter or digit)", nodeID)
	}
	return InitiatorPrefix + nodeID, nil
}

// TargetName is the target that holds a volume as its LUN 1.
func TargetName(volumeID string) (string, error) {
	if !nameChars.MatchString(volumeID) {
		return "", fmt.Errorf("volume ID %q cannot name an iSCSI target", volumeID)
	}
	return TargetPrefix + volumeID, nil
}
