fn main() {
    println!("tailbound");
}
