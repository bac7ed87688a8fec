//go:build !race

package lease_test

const race = false
