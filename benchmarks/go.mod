module github.com/driftguard/driftguard/benchmarks

go 1.26.8

replace github.com/driftguard/driftguard => ../
