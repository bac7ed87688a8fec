package valkeyplumbing

import "github.com/golib/lease/internal/keyspace"

// Slots is the number of hash slots of a Valkey cluster.
const Slots = 16384

// KeySlot returns the cluster hash slot of a key or shard channel named
// name, as the server computes it (CLUSTER KEYSLOT): CRC16 (XMODEM) of its
// hash tag (keyspace.HashTag: the bytes between the first '{' and the
// first '}' after it, if there are any; otherwise the whole name), modulo
// Slots.
func KeySlot(name string) uint16 { return crc16(keyspace.HashTag(name)) % Slots }

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum of the cluster specification.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}
