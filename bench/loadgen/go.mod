module aclgate.dev/bench/loadgen

go 1.21
