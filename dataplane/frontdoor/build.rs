//! Generates the KServe v2 / Triton gRPC server from the vendored .proto
//! files (proto/README.md). protox parses them, so no protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/grpc_service.proto");
    println!("cargo:rerun-if-changed=proto/model_config.proto");
    let fds = protox::compile(["grpc_service.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .build_transport(false)
        // Unimplemented RPCs answer UNIMPLEMENTED without a hand-written stub.
        .generate_default_stubs(true)
        // Raw tensor bytes are views of tonic's receive buffer, not copies.
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(fds)?;
    Ok(())
}
