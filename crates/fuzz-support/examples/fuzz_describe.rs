//! Prints what a fuzz input of a structured target stands for:
//! `cargo run -p ferrotx-fuzz-support --example fuzz_describe -- <target> <file>...`.

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    for path in args {
        let data = std::fs::read(&path)?;
        println!("== {path}");
        match target.as_str() {
            "participant" => print!("{}", ferrotx_fuzz_support::participant::describe(&data)),
            "membership" => print!("{}", ferrotx_fuzz_support::membership::describe(&data)),
            "redis_session" => print!("{}", ferrotx_fuzz_support::redis_session::describe(&data)),
            _ => println!("{data:?}"),
        }
    }
    Ok(())
}
