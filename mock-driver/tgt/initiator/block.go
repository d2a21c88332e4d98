package initiator

import (
	"encoding/binary"
	"fmt"
)

// SCSI block commands (SBC-3) a node's workload needs.
const (
	opReadCapacity10 = 0x25
	opRead10         = 0x28
	opWrite10        = 0x2a
	// maxTransfer bounds one command's data: one burst, within what the
	// login negotiated for immediate data and for a Data-In segment.
	maxTransfer = 65536
)

// ReadCapacity returns the LUN's number of blocks and block size.
func (c *Conn) ReadCapacity() (blocks uint64, blockSize int, err error) {
	cdb := make([]byte, 10)
	cdb[0] = opReadCapacity10
	data, err := c.Command(cdb, nil, 8)
	if err != nil {
		return 0, 0, fmt.Errorf("READ CAPACITY(10): %w", err)
	}
	last := binary.BigEndian.Uint32(data[0:4])
	return uint64(last) + 1, int(binary.BigEndian.Uint32(data[4:8])), nil
}

// Write writes data, a whole number of blocks of blockSize, at lba with
// WRITE(10). The target acknowledged it when it returns nil.
func (c *Conn) Write(lba uint32, data []byte, blockSize int) error {
	if err := checkTransfer(len(data), blockSize); err != nil {
		return err
	}
	_, err := c.Command(rw10(opWrite10, lba, len(data)/blockSize), data, 0)
	if err != nil {
		return fmt.Errorf("WRITE(10) at %d: %w", lba, err)
	}
	return nil
}

// Read reads n blocks of blockSize from lba with READ(10).
func (c *Conn) Read(lba uint32, n, blockSize int) ([]byte, error) {
	if err := checkTransfer(n*blockSize, blockSize); err != nil {
		return nil, err
	}
	data, err := c.Command(rw10(opRead10, lba, n), nil, n*blockSize)
	if err != nil {
		return nil, fmt.Errorf("READ(10) at %d: %w", lba, err)
	}
	return data, nil
}

func checkTransfer(n, blockSize int) error {
	if blockSize <= 0 || n <= 0 || n%blockSize != 0 || n > maxTransfer {
		return fmt.Errorf("a transfer of %d bytes in blocks of %d: want a positive whole number of blocks, at most %d bytes", n, blockSize, maxTransfer)
	}
	return nil
}

func rw10(op byte, lba uint32, blocks int) []byte {
	cdb := make([]byte, 10)
	cdb[0] = op
	binary.BigEndian.PutUint32(cdb[2:], lba)
	binary.BigEndian.PutUint16(cdb[7:], uint16(blocks))
	return cdb
}
