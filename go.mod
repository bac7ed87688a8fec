module github.com/golib/lease

go 1.26.6
