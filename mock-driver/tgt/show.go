package tgt

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Target is what tgtd reports about one target (`tgtadm --mode target --op
// show`), as far as the backend needs it.
type Target struct {
	TID  int
	Name string
	// Sessions are the target's I_T nexuses: live iSCSI sessions.
	Sessions []Session
	// ACL lists the initiator names and addresses allowed to log in.
	ACL []string
	// LUNs maps a LUN number to its backing file ("" for LUN 0, the
	// controller).
	LUNs map[int]string
}

// Session is one I_T nexus of a target: an iSCSI session of one initiator
// with its connections.
type Session struct {
	SID         int
	Initiator   string
	Connections []int
}

// Allowed reports whether the ACL lets initiator log in.
func (t *Target) Allowed(initiator string) bool {
	return t != nil && slices.Contains(t.ACL, initiator)
}

// SessionsOf returns the sessions of one initiator.
func (t *Target) SessionsOf(initiator string) []Session {
	if t == nil {
		return nil
	}
	var out []Session
	for _, s := range t.Sessions {
		if s.Initiator == initiator {
			out = append(out, s)
		}
	}
	return out
}

// section is the part of a target's listing a line belongs to.
type section int

const (
	sectionOther section = iota
	sectionNexus
	sectionLUN
	sectionACL
)

// ParseTargets parses the output of `tgtadm --lld iscsi --mode target --op
// show`. Lines it does not know are skipped; a line it knows with a value it
// cannot read is an error, because a fence must never be confirmed from a
// listing it misread.
func ParseTargets(out string) ([]*Target, error) {
	var (
		targets []*Target
		cur     *Target
		sec     section
		lun     = -1
	)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		text := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		if text == "" {
			continue
		}
		if indent == 0 {
			t, err := parseTargetLine(text)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			cur, sec, lun = t, sectionOther, -1
			targets = append(targets, cur)
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("line %d: %q before any target", n, text)
		}
		if indent <= 4 {
			sec = sectionOf(text)
			continue
		}
		var err error
		switch sec {
		case sectionNexus:
			err = parseNexusLine(cur, text)
		case sectionLUN:
			lun, err = parseLUNLine(cur, text, lun)
		case sectionACL:
			cur.ACL = append(cur.ACL, text)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read target listing: %w", err)
	}
	return targets, nil
}

func sectionOf(header string) section {
	switch header {
	case "I_T nexus information:":
		return sectionNexus
	case "LUN information:":
		return sectionLUN
	case "ACL information:":
		return sectionACL
	}
	return sectionOther
}

// parseTargetLine reads "Target 1: iqn...".
func parseTargetLine(text string) (*Target, error) {
	rest, ok := strings.CutPrefix(text, "Target ")
	id, name, ok2 := strings.Cut(rest, ": ")
	if !ok || !ok2 {
		return nil, fmt.Errorf("want \"Target <tid>: <name>\", got %q", text)
	}
	tid, err := strconv.Atoi(id)
	if err != nil {
		return nil, fmt.Errorf("target ID in %q: %w", text, err)
	}
	return &Target{TID: tid, Name: strings.TrimSpace(name), LUNs: map[int]string{}}, nil
}

// parseNexusLine reads the lines of the I_T nexus section: "I_T nexus: 3",
// "Initiator: iqn... alias: none", "Connection: 0", "IP Address: ...".
func parseNexusLine(t *Target, text string) error {
	key, val, _ := strings.Cut(text, ":")
	val = strings.TrimSpace(val)
	switch key {
	case "I_T nexus":
		sid, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("session ID in %q: %w", text, err)
		}
		t.Sessions = append(t.Sessions, Session{SID: sid})
	case "Initiator":
		s, err := lastSession(t, text)
		if err != nil {
			return err
		}
		name, _, _ := strings.Cut(val, " alias:")
		s.Initiator = strings.TrimSpace(name)
	case "Connection":
		s, err := lastSession(t, text)
		if err != nil {
			return err
		}
		cid, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("connection ID in %q: %w", text, err)
		}
		s.Connections = append(s.Connections, cid)
	}
	return nil
}

func lastSession(t *Target, text string) (*Session, error) {
	if len(t.Sessions) == 0 {
		return nil, fmt.Errorf("%q outside an I_T nexus", text)
	}
	return &t.Sessions[len(t.Sessions)-1], nil
}

// parseLUNLine reads "LUN: 1" and "Backing store path: /path" (or "None")
// and returns the LUN the following lines belong to.
func parseLUNLine(t *Target, text string, lun int) (int, error) {
	key, val, _ := strings.Cut(text, ":")
	val = strings.TrimSpace(val)
	switch key {
	case "LUN":
		n, err := strconv.Atoi(val)
		if err != nil {
			return lun, fmt.Errorf("LUN in %q: %w", text, err)
		}
		t.LUNs[n] = ""
		return n, nil
	case "Backing store path":
		if lun < 0 {
			return lun, fmt.Errorf("%q outside a LUN", text)
		}
		if val != "None" {
			t.LUNs[lun] = val
		}
	}
	return lun, nil
}
