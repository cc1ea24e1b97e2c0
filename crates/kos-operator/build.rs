//! Compiles cluster-autoscaler's externalgrpc.proto (proto/: the file of kubernetes/autoscaler's tag
//! cluster-autoscaler-1.36.1, unchanged) with protox, a proto compiler in Rust, so the build needs no
//! protoc binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let fds = protox::compile(["externalgrpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
