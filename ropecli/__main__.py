from ropecli.cli.app import main

main()
