use ferrotx_sim::membership_scenarios;
use ferrotx_sim::run::run;
fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let name = std::env::args().nth(1).unwrap();
    let seed: u64 = std::env::args().nth(2).unwrap().parse().unwrap();
    let options = membership_scenarios::options(&name, seed);
    println!("{:?}", options.plan.as_ref().unwrap().schedule);
    let report = run(&mut *membership_scenarios::scenario(&name), &options);
    println!("{:#?}", report.membership);
}
