package fencevalkey

import (
	"sync"

	"github.com/golib/lease/internal/valkeyplumbing"
)

// slots is the number of hash slots of a Valkey cluster.
const slots = valkeyplumbing.Slots

// keySlot returns the cluster hash slot of key (valkeyplumbing.KeySlot).
func keySlot(key string) uint16 { return valkeyplumbing.KeySlot(key) }

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
			if s := keySlot(string(buf)); tags[s] == "" {
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
