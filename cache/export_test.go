package cache

// EntryNames returns the names of what key's entry keeps on the server: the
// refresh lease's record, the value, the freshness marker, the
// invalidation mark and the publication channel.
func (c *Cache) EntryNames(key string) (record, value, fresh, mark, channel string) {
	k, err := c.keys("test", key)
	if err != nil {
		panic(err)
	}
	return k.record, k.value, k.fresh, k.mark, k.channel
}

// Flights returns the number of flights running in c.
func (c *Cache) Flights() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.flights)
}

// ParseMark returns the refresh lease's key and record of the entry whose
// invalidation mark is named name, or false if name is no mark of s.
func (s *Sweeper) ParseMark(name string) (leaseKey, record string, ok bool) {
	return s.parseMark(name)
}
