//! Any text as tensor IR (first byte even) or loop IR (odd): parsing returns a value or an
//! error, never panics, and what parses prints to text that parses to the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(src) = std::str::from_utf8(rest) else { return };
    if which % 2 == 0 {
        let Ok(g) = kiln_tir::text::parse(src) else { return };
        let text = kiln_tir::text::print(&g);
        let again = kiln_tir::text::parse(&text).expect("printed tensor IR parses");
        assert_eq!(kiln_tir::text::print(&again), text, "tensor IR does not round-trip");
    } else {
        let Ok(p) = kiln_loops::text::parse(src) else { return };
        let _ = kiln_loops::verify::verify(&p);
        let text = kiln_loops::text::print(&p);
        let again = kiln_loops::text::parse(&text).expect("printed loop IR parses");
        assert_eq!(kiln_loops::text::print(&again), text, "loop IR does not round-trip");
    }
});
