//! Writes every target's seed inputs ([`ferrotx_fuzz_support::seeds`]) into
//! `fuzz/corpus/<target>/seed-*`: `cargo run -p ferrotx-fuzz-support --example fuzz_seeds`.

fn main() -> std::io::Result<()> {
    let fuzz = ferrotx_fuzz_support::corpus::fuzz_dir();
    for (target, _) in ferrotx_fuzz_support::TARGETS {
        let dir = fuzz.join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        let seeds = ferrotx_fuzz_support::seeds::seeds(target);
        for (name, data) in &seeds {
            std::fs::write(dir.join(name), data)?;
        }
        println!("{target}: {} seeds in {}", seeds.len(), dir.display());
    }
    Ok(())
}
