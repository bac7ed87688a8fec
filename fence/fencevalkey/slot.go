package fencevalkey

import (
	"strings"
	"sync"
)

// slots is the number of hash slots of a Valkey cluster.
const slots = 16384

// keySlot returns the cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, modulo 16384. The hash tag is the part between the first '{' and the
// first '}' after it, if that part is not empty; otherwise the whole key.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % slots
}

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

// crc16 is CRC-16/XMODEM, the checksum of Valkey cluster slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// tagAlphabet is what slot tags are made of: letters and digits, so that a
// tag holds no brace and reads plainly in a key's name.
const tagAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// slotTags returns, for each hash slot, its tag: the shortest string of
// tagAlphabet whose slot it is, the first in the alphabet's order among
// those as short. A floor key carries the tag of its slot (see
// Fence.FloorKey), so the table is part of the names floors are stored
// under: it must never change. It is built once, when first needed, by
// trying every string of one, two and three characters (a few hundred
// thousand CRC16s); TestSlotTags checks that it covers every slot and has
// not changed.
var slotTags = sync.OnceValue(func() *[slots]string {
	var tags [slots]string
	left := slots
	buf := make([]byte, 0, 4)
	var try func(n int)
	try = func(n int) {
		if len(buf) == n {
			if s := crc16(string(buf)) % slots; tags[s] == "" {
				tags[s] = string(buf)
				left--
			}
			return
		}
		for i := 0; i < len(tagAlphabet) && left > 0; i++ {
			buf = append(buf, tagAlphabet[i])
			try(n)
			buf = buf[:len(buf)-1]
		}
	}
	for n := 1; left > 0; n++ {
		try(n)
	}
	return &tags
})

// slotTag returns the tag of hash slot s.
func slotTag(s uint16) string { return slotTags()[s] }
