//! Renders a spec's report: `cargo run -p kos-cluster --example render -- FILE`.
fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: render FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    match kos_cluster::load(&path, &text) {
        Ok(loaded) if loaded.warnings.is_empty() => println!("{path}: ok"),
        Ok(loaded) => eprintln!("{:?}", miette::Report::new(loaded.warnings)),
        Err(report) => {
            eprintln!("{:?}", miette::Report::new(report));
            std::process::exit(1);
        }
    }
}
