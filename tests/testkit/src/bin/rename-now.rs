//! `rename-now FROM TO`: renames FROM to TO and prints the realtime clock, in microseconds, read
//! right before the rename(2) call. The benchmark's "arrival" of a bundle (tests/bench/bench.sh):
//! the moment its name appears, without the start of an `mv` process before it (~15-20 ms under
//! QEMU TCG, paid by the glue and by nodectld alike and part of neither).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [from, to] = args.as_slice() else {
        eprintln!("usage: rename-now FROM TO");
        std::process::exit(2);
    };
    let now = std::time::SystemTime::now();
    if let Err(e) = std::fs::rename(from, to) {
        eprintln!("rename-now: {from} -> {to}: {e}");
        std::process::exit(1);
    }
    let us = now
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros();
    println!("{us}");
}
