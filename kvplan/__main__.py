from kvplan._entry import main

main()
